"""The operator library, without click: what ``crawlplug`` commands and the dashboard
do, as functions over a Redis client and a crawl's keys.

* :mod:`.status` a read-only snapshot of a crawl (counts, rates, ETA, nodes);
* :mod:`.nodes` each node's state: live, silent, dead;
* :mod:`.dead` dead letters: list, requeue, drop;
* :mod:`.transfer` a crawl's state exported as JSON lines, and imported.
"""
