"""Prometheus metrics: one feature.

* :mod:`.exporter` every crawl's metrics from its status snapshot, served by ``crawlplug
  control --metrics-port`` and the dashboard at ``/metrics``;
* :mod:`.node` a node's own ``/metrics`` (the Scrapy extension, on with
  ``CRAWLPLUG_METRICS_PORT``).

Importing the package imports neither (prometheus_client only when asked).
"""
