"""What the tests share: real Redis servers, real scrapy nodes, the loopback sites, fault proxies.

Nothing here stands in for Redis: every helper starts or drives a real process."""
