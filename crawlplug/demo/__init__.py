"""The demo sites and the runner of ``make crawl``; nothing else imports them.

* :mod:`.shop` the demo shop (``python -m crawlplug.demo.shop``);
* :mod:`.cars` a brand -> series -> model catalogue (``python -m crawlplug.demo.cars``);
* :mod:`.crawl` ``make crawl``: a real two-node crawl of the shop, and its summary.
"""
