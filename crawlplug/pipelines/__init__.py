"""Scraped items into Redis: ``RedisItemPipeline`` (``crawlplug.pipelines.RedisItemPipeline``
in a project's ``ITEM_PIPELINES``), and reading them back (``crawlplug items``).

* :mod:`.itemjson` an item as one line of JSON (the conversions JSON needs);
* :mod:`.redisitems` the pipeline (a list or a stream; its retries never store an item
  twice) and the readers;
* :mod:`.sqlitems` ``SQLItemPipeline``: items upserted by key into PostgreSQL or SQLite,
  each row marked with the runs that saw and changed it, and the change report of a run.
"""

from .itemjson import item_json
from .redisitems import RedisItemPipeline, count_items, iter_items
from .sqlitems import SQLItemPipeline

__all__ = ["RedisItemPipeline", "SQLItemPipeline", "count_items", "item_json", "iter_items"]
