"""A crawl's history: one feature, its storage, its Lua, its reading.

* :mod:`.store` the records in Redis, a minute's for a day and an hour's for a month, and
  the sample call (``lua/history.lua``) that a node's frontier sends with each heartbeat
  (the node hands the frontier :func:`.store.sample_call`: the frontier knows no history);
* :mod:`.series` the history read per 10 s, minute or hour, for ``crawlplug status``, the
  dashboard, the console and the alert rules.

The two sit on different layers (setup.cfg): the store below the Scheduler that samples it,
the reading beside the operator library whose status snapshot it joins. Importing the
package imports neither.
"""
