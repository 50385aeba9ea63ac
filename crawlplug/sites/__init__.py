"""Config-driven site spiders: a site is a definition (YAML/JSON, or stored in Redis),
not code. ``scrapy crawl site -a site=NAME`` (docs/sites.md).

* :mod:`.definition` the schema of a site definition, validated (pydantic);
* :mod:`.starts` start URLs with ranges; :mod:`.extract` fields from a page;
* :mod:`.spider` the spider and its pipeline; :mod:`.outcomes` per-field counts;
* :mod:`.store` definitions kept in Redis, shared by every node, with each site's
  history (:mod:`.versions`); :mod:`.checking` a definition's text checked, line by line.

Uses crawlplug's public core only.
"""
