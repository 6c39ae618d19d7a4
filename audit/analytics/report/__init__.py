"""The report's outputs from an Analysis: summary.json and Parquet aggregates, the headline
sentences, report.html with its inline SVG charts."""
