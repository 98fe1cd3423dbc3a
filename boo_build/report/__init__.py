"""What a build reports: ``build_report`` (the stage records gathered into
``build-report.json`` and the summary), ``bench_table`` (``bench.csv``) and
the HTML page (``page``, drawn from ``page_data`` by ``page_charts`` and
``page_html``)."""
