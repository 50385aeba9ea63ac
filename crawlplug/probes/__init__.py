"""What a node records about its own crawl beside Scrapy's stats, as Scrapy components the
add-on enables: pages, items and errors per host (:mod:`.domainstats`), errors by kind
with sample URLs (:mod:`.errorsamples`). (The Scrapyd job a node runs as is recorded by
the Scrapyd feature's own extension, crawlplug.scrapyd.node.)
"""
