"""Nodes started through Scrapyd: one feature, its storage and the node-side part of it.

* :mod:`.store` each Scrapyd job's record in Redis (who started it, for which run, the node
  it became);
* :mod:`.daemon` a Scrapyd daemon's JSON API;
* :mod:`.addresses` whether a host names this machine only, in any spelling;
* :mod:`.launch` ``crawlplug start`` and a schedule's firing: the checks, the jobs started;
* :mod:`.jobs` jobs refreshed from their daemons, cancelled, matched to nodes;
* :mod:`.node` the Scrapy extension by which a node records the job it runs as.
"""
