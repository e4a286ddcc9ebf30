# Two commands on a fresh machine: `make run` and `make test`. Both set themselves up.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
JARS        := .jars
MVN         := mvn -q -B -f conf/maven/pom.xml
# The bundled sample: ten days of a broker's log dir, 31 groups and the topics they consume
# (samples/days, samples/README.md); samples/logdir, a 15-second real capture, feeds the tests.
SAMPLE      ?= samples/days/logdir
WAREHOUSE   ?= warehouse
# The sample ends at this instant; replaying "as of" it makes `make run` repeatable.
SAMPLE_NOW  ?= $(shell cat $(dir $(SAMPLE:/=))NOW 2>/dev/null)
RECORDS     ?= 10000000

export PYSPARK_PYTHON        := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)
export PYTHONPATH            := $(CURDIR)

.PHONY: help setup run test lint bench clean jars venv submit airflow-venv report browser soak

help:
	@echo "make run    - set up, replay the bundled sample log into ./$(WAREHOUSE) and print a summary"
	@echo "make test   - set up, run every test"
	@echo "make lint   - ruff (lint and format check) and mypy over the tree"
	@echo "make report - set up, write the HTML report of ./$(WAREHOUSE) (replays the sample first if it is empty)"
	@echo "make bench  - set up, generate a log of RECORDS records and measure the replay"
	@echo "make serve  - set up, then serve the warehouse read-only over Spark Connect and JDBC (loopback)"
	@echo "make bench-ab BASE=<rev> - the working tree against a commit, alternating (incremental, no-op; FULL=1: full runs)"
	@echo "make bench-endpoint - one canned audit through the endpoint against a cold jobs.audit"
	@echo "make bench-scale - the full replay's rate on a 50M-record log"
	@echo "make bench-cluster - the full replay locally and on a two-worker Spark cluster, from disk and from S3"
	@echo "make bench-history - a run's questions of the commit history on a warehouse a month old (TREE=<checkout>: another revision)"
	@echo "make soak   - set up, run the property tests (tests/test_fuzz.py) with SOAK_SCALE x more examples"
	@echo "make setup  - virtualenv at $(VENV) and JVM jars in $(JARS)/ (idempotent)"
	@echo "make airflow-venv - Airflow 3 in its own virtualenv at .venv-airflow (idempotent)"

setup: venv jars s3-jars kafka-jars jvm-extension prometheus numba-cache bytecode jvm-archive

# The driver JVM's classes (Spark's, Scala's, Delta's) in an archive it maps as it starts
# (lib/spark/jvm_archive.py): a job's JVM is up in about 2.3 s instead of 4. Written once per JDK
# and jar set, by a small replay run (half a minute); after that a check of a few milliseconds.
.PHONY: jvm-archive
jvm-archive: jvm-extension numba-cache bytecode
	@$(PY) -m jobs.jvm_archive

# The SQL endpoint's read-only guard and its JDBC token check (conf/jvm/src), compiled against
# pyspark's jars into the folder of jars every session loads.
.PHONY: jvm-extension
jvm-extension: $(JARS)/spark/offsets-lake-jvm.jar
$(JARS)/spark/offsets-lake-jvm.jar: $(wildcard conf/jvm/src/offsetslake/*.java) conf/jvm/build.sh $(JARS)/spark/.stamp $(VENV)/.stamp
	bash conf/jvm/build.sh $@ $(PY)

# Prometheus and its Pushgateway, for the metrics tests: Debian's packages (conf/prometheus/install.sh;
# a no-op once installed).
.PHONY: prometheus
prometheus:
	@bash conf/prometheus/install.sh >/dev/null

# The repository's modules compiled once (every Spark worker of every run imports them; where
# PYTHONDONTWRITEBYTECODE is set, as on CI's machines, Python would compile them in each process)
.PHONY: bytecode
bytecode: lib/__pycache__/.bytecode-stamp
lib/__pycache__/.bytecode-stamp: $(shell find lib jobs schemas -name '*.py') $(VENV)/.stamp
	$(PY) -m compileall -q lib jobs schemas
	@mkdir -p lib/__pycache__ && touch $@

# Compile the numba kernels (decoder, engine, assignors) into their on-disk cache once (Spark workers load it).
.PHONY: numba-cache
numba-cache: lib/__pycache__/.numba-stamp
# numba checks a cached kernel against its own module's file only: a kernel whose helper (in
# another module, e.g. lib/decode/numba_bytes.py) changed would load the old machine code. So a
# change to any of them compiles every kernel again.
lib/__pycache__/.numba-stamp: $(wildcard lib/decode/*.py lib/replay/engine.py lib/assignors/fast*.py lib/lake/lag_rows.py lib/source/topic_scan.py) $(VENV)/.stamp
	@find lib -path '*/__pycache__/*' \( -name '*.nbi' -o -name '*.nbc' \) -delete
	$(PY) -m lib.testdata.kernels --warm
	@mkdir -p lib/__pycache__ && touch $@

venv: $(VENV)/.stamp
$(VENV)/.stamp: requirements.txt constraints.txt
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	@touch $@

# Airflow 3 in its own virtualenv (its pins clash with the pipeline's); the DAGs in airflow_dags/
# start the jobs in $(VENV) or under spark-submit. conf/airflow/constraints.txt is a pip freeze
# of what resolved.
AIRFLOW_VENV := .venv-airflow
airflow-venv: $(AIRFLOW_VENV)/.stamp
$(AIRFLOW_VENV)/.stamp: conf/airflow/requirements.txt conf/airflow/constraints.txt
	@test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIRFLOW_VENV)/bin/python -m pip install -q -r conf/airflow/requirements.txt -c conf/airflow/constraints.txt
	@touch $@

jars: $(JARS)/spark/.stamp
$(JARS)/spark/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/spark && mkdir -p $(JARS)/spark
	$(MVN) -P spark dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/spark
	@touch $@

# hadoop-aws and the AWS SDK (s3a:// paths), and S3Proxy for the object-storage tests (tests/s3)
.PHONY: s3-jars
s3-jars: $(JARS)/s3/.stamp $(JARS)/s3proxy/.stamp $(JARS)/s3proxy-2.6/.stamp
$(JARS)/s3/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/s3 && mkdir -p $(JARS)/s3
	$(MVN) -P s3 dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/s3
	@touch $@
$(JARS)/s3proxy/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/s3proxy && mkdir -p $(JARS)/s3proxy
	$(MVN) -P s3proxy dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/s3proxy
	@touch $@
$(JARS)/s3proxy-2.6/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/s3proxy-2.6 && mkdir -p $(JARS)/s3proxy-2.6
	$(MVN) -P s3proxy-2.6 dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/s3proxy-2.6
	@touch $@

# Kafka brokers for the integration tests (tests/broker): one classpath per version.
.PHONY: kafka-jars
kafka-jars: $(JARS)/kafka4/.stamp $(JARS)/kafka39/.stamp
$(JARS)/kafka4/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/kafka4 && mkdir -p $(JARS)/kafka4
	$(MVN) -P kafka4 dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/kafka4
	@touch $@
$(JARS)/kafka39/.stamp: conf/maven/pom.xml
	@rm -rf $(JARS)/kafka39 && mkdir -p $(JARS)/kafka39
	$(MVN) -P kafka39 dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JARS)/kafka39
	@touch $@

# The read-only SQL endpoint (Spark Connect and JDBC, loopback) over the warehouse `make run` made.
.PHONY: serve
serve: setup
	$(PY) -m jobs.serve --warehouse $(WAREHOUSE)

run: setup
	$(PY) -m jobs.replay_offsets --input $(SAMPLE) --warehouse $(WAREHOUSE) --full $(if $(SAMPLE_NOW),--now $(SAMPLE_NOW),)

# Lint and type checks (settings in pyproject.toml); .ci/run runs this before the tests.
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: setup airflow-venv browser
	$(PY) -m pytest

bench: setup
	$(PY) -m jobs.bench --records $(RECORDS)

# The working tree against BASE (a commit) on make bench's log, each run its own process, the two
# alternating round by round: the machine drifts more between hours than most changes move.
BASE ?= HEAD~1
ROUNDS ?= 6
.PHONY: bench-ab
bench-ab: setup
	$(PY) -m jobs.bench_ab --base $(BASE) --rounds $(ROUNDS) --records $(RECORDS) $(if $(FULL),--full)

# The full replay's rate on a 50M-record log (cost linear in the log: within 10% of the 10M rate).
.PHONY: bench-endpoint
bench-endpoint: setup
	$(PY) -m jobs.bench_endpoint

.PHONY: bench-scale
bench-scale: setup
	$(PY) -m jobs.bench --records 50000000 --scale-only

# A run's questions of the commit history on a warehouse a month old (8,640 checkpoint commits);
# TREE=<a checkout> measures another revision's lib on the same warehouse (jobs/bench_history.py)
.PHONY: bench-history
bench-history: setup
	$(PY) -m jobs.bench_history $(if $(TREE),--tree $(TREE))

# The bench log's full replay on local Spark and on a two-worker standalone cluster, each from
# local disk and from an S3 server to an S3 server (jobs/bench_cluster.py)
.PHONY: bench-cluster
bench-cluster: setup
	$(PY) -m jobs.bench_cluster --records $(RECORDS)

# The codec's property tests with SOAK_SCALE times the examples of `make test` and fresh
# randomness each run (hypothesis keeps failing examples in .hypothesis/ and prints how to
# reproduce them). SOAK_ARGS go to pytest, e.g. SOAK_ARGS="--hypothesis-seed=7 -x".
SOAK_SCALE ?= 50
SOAK_ARGS  ?=
.PHONY: soak
soak: setup
	FUZZ_SCALE=$(SOAK_SCALE) $(PY) -m pytest tests/test_fuzz.py -q --hypothesis-show-statistics $(SOAK_ARGS)

clean:
	rm -rf $(WAREHOUSE) spark-warehouse .pytest_cache

# The code as one zip for spark-submit --py-files: executors get it from the driver, never
# from this repository's path (build/offsets_lake.zip).
.PHONY: dist
dist:
	$(PY) -m jobs.build_dist

# The job under spark-submit: `make submit ARGS="[--master spark://HOST:PORT] --input LOG_DIR
# --warehouse WH"` (client mode). Delta's jars must be on spark-submit's --jars (the JVM
# starts before Python adds them); the code travels as build/offsets_lake.zip.
SPARK_HOME_PIP = $(CURDIR)/$(VENV)/lib/python3.11/site-packages/pyspark
# With s3a:// paths in ARGS: hadoop-aws and the AWS SDK on the driver's and executors' class
# path from this machine's .jars/s3 (workers on other hosts need them at the same path, or
# --packages org.apache.hadoop:hadoop-aws:3.5.0 instead). Endpoint and credentials: the AWS_*
# environment or --conf spark.hadoop.fs.s3a.* (README, "On a cluster and on S3").
S3_CLASSPATH = $$(ls $(CURDIR)/$(JARS)/s3/*.jar | paste -sd:)
S3_CLASSPATH_ARGS = --driver-class-path "$(S3_CLASSPATH)" --conf "spark.executor.extraClassPath=$(S3_CLASSPATH)"
submit: setup dist
	SPARK_HOME=$(SPARK_HOME_PIP) $(SPARK_HOME_PIP)/bin/spark-submit \
	  --jars "$$(ls $(CURDIR)/$(JARS)/spark/*.jar | paste -sd,)" \
	  --py-files $(CURDIR)/build/offsets_lake.zip \
	  --driver-java-options "-Dlog4j2.configurationFile=file:$(CURDIR)/conf/log4j2.properties" \
	  $(if $(findstring s3a://,$(ARGS)),$(S3_CLASSPATH_ARGS)) \
	  jobs/replay_offsets.py $(ARGS)

# The report: one self-contained HTML page, $(WAREHOUSE)/report/index.html, as of REPORT_NOW
# (the sample's instant by default). Replays the sample first when the warehouse has no tables.
REPORT_NOW ?= $(SAMPLE_NOW)
report: setup
	@test -d $(WAREHOUSE)/offsets_log/_delta_log || $(MAKE) --no-print-directory run
	$(PY) -m jobs.report --warehouse $(WAREHOUSE) $(if $(REPORT_NOW),--now $(REPORT_NOW),) $(REPORT_ARGS)

# Debian's chromium, for the report's browser test (needs root and apt); instant when installed.
# When it cannot be installed, that test skips and says so.
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || echo "browser: chromium could not be installed; the browser test of tests/test_report.py will skip"; }
