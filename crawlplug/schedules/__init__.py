"""Scheduled runs: one feature, its storage and its Lua.

* :mod:`.store` each crawl's schedules and firings in Redis, and the leadership that
  writes firings (``lua/firing.lua`` refuses a leader that lost its lease);
* :mod:`.firing` cron expressions, a schedule made and checked, a firing carried out
  (the Scrapyd jobs a schedule starts: crawlplug.scrapyd.launch).

The control process (crawlplug.controlprocess) fires them.
"""
