"""The Redis server a crawl uses, from crawlplug's side: clients to it from Scrapy settings
or a URL (:mod:`.clients`: TLS, Sentinel, Cluster, the ACL a node needs), the project's
embedded redis-server started when no server is named (:mod:`.embedded`), and the
server's memory limit and eviction policy as a crawl sees them (:mod:`.memory`).

Named ``server``, not ``connection`` or ``redis``: redis-py has both words
(``redis.connection`` is its socket layer), and these modules are about the server.
"""
