"""The operator library, without click: what ``crawlplug`` commands and the dashboard
do, as functions over a Redis client and a crawl's keys.

* :mod:`.status` a read-only snapshot of a crawl (counts, rates, ETA, nodes);
* :mod:`.nodes` each node's state: live, silent, dead;
* :mod:`.dead` dead letters: list, requeue, drop;
* :mod:`.forget` forgetting URLs' fingerprints, as the crawl's nodes compute them.

The platform's features are packages of their own (crawlplug.alerts, .schedules,
.scrapyd, .history, .reports, .metrics); the console (crawlplug.console) and the CLI
call this library and theirs.

Export and import write every storage format of the frontier: they live with it
(crawlplug.crawl.transfer). Reads of the frontier's keys go through
crawlplug.crawl.views.
"""
