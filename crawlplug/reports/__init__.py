"""Reports of a crawl's runs: one feature, its storage and its reading.

* :mod:`.store` the Scrapy stats of the nodes of ended runs, kept for the last 20 runs
  (copied by crawlplug.crawl.runs when a run begins, before the node records go);
* :mod:`.report` per node, domain, site definition and field, of the current run or a
  kept one: ``crawlplug report``, the dashboard's Report page, the console.

The two sit on different layers (setup.cfg): the store under the crawl's control plane
that writes it, the report beside the operator library. Importing the package imports
neither.
"""
