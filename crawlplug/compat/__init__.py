"""scrapy-redis compatibility, in one place: the names of its settings
(:mod:`.names`, read by :mod:`crawlplug.config`), its fingerprints
(:mod:`.legacy`: ``crawlplug.legacy.ScrapyRedisDupeFilter``) and the migration of a
crawl it was running (:mod:`.migrate`, ``crawlplug migrate from-scrapy-redis``)."""
