"""Operating a deployment: embedded servers, service status, partition migration."""
