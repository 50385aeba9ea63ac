"""Alert rules, from their text to their notification: one feature, its storage and its Lua.

* :mod:`.store` the rules, their states and their log in Redis (``lua/alert.lua`` writes a
  state only for the leader of the crawl's ``alerts`` duty);
* :mod:`.grammar` a condition's grammar (lark, LALR: linear in its length);
* :mod:`.measures` what rules watch, each computed from the crawl's status snapshot;
* :mod:`.rules` a rule made and checked, its state's next step, its message, the Apprise
  notification, the view the CLI and the dashboard show;
* :mod:`.evaluator` the leader's loop (a control process, or a dashboard);
* :mod:`.declared` the Scrapy extension storing the rules of ``CRAWLPLUG_ALERTS``.

Importing the package imports none of them: a node loads only what it uses.
"""
