# The two commands of the README: `make serve` and `make test`.
# Every cargo invocation shares one optimised profile and one target dir outside the clone.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/sluice-target
CARGO ?= cargo
ARGS ?=

.PHONY: model test-data serve test lint bench

model:
	@scripts/fetch-model >/dev/null

# What the tests read beside the default model: Gemma 3 270M and llama.cpp's tokenizer
# test vocabularies.
test-data: model
	@scripts/fetch-model gemma3 >/dev/null
	@scripts/fetch-model vocabs >/dev/null
	@scripts/venv >/dev/null

serve: model
	$(CARGO) run --release --bin sluice -- serve $(ARGS)

test: test-data
	scripts/test-deps
	$(CARGO) test --release --workspace
	$(CARGO) build --release --bin sluice
	scripts/test-python
	scripts/test-node
	scripts/test-schemathesis
	scripts/test-deploy

lint:
	scripts/module-cycles
	scripts/doc-paths
	$(CARGO) fmt --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

bench: model
	$(CARGO) bench --bench speed
