# nearbyd: build, demo, test, benchmark and install.
#
#   make demo     set up, build and run the two-device demo
#   make test     set up, build and run every test
#   make fuzz     run each libFuzzer harness for FUZZ_SECONDS (60; CI runs 10)
#   make bench    run the benchmarks (static release builds, as packaged), figures for doc/performance.md
#   make bench-modem  the audio modem against ggwave (about 25 minutes)
#   make deb      Debian 12 packages into .build/debian, checked by lintian

SWIFT ?= swift
PREFIX ?= /usr
DESTDIR ?=
# A virtual environment of Debian's Python for what Debian does not package, from
# PyPI: openapi-spec-validator, which checks doc/server-api/openapi.yaml, and
# slixmpp, the XMPP client of XMPPTests. Debian's Python refuses system-wide pip installs.
VENV := .build/venv

# Debian packages the build, the demo and the tests need (the tests' Python
# D-Bus clients, and python-dbusmock standing in for logind and a notification
# daemon, run on Debian's /usr/bin/python3; busctl and systemd-analyze are
# systemd's; the storage tests start throwaway clusters with postgresql's
# initdb and pg_ctl; GDBusExampleTests builds examples/gdbus-subscribe.c
# against GLib's GIO; HAProxyTests runs dist/haproxy/nearby-server.cfg with
# Debian's haproxy).
PACKAGES := systemd libsystemd-dev libsqlite3-dev libbluetooth-dev libasound2-dev libxml2-dev pkg-config dbus dbus-bin libglib2.0-bin libglib2.0-dev python3 python3-venv \
	python3-dbus-next python3-dbusmock postgresql haproxy

PROGRAMS := nearbyd nearby-server nearby-air nearbyctl

.PHONY: packages setup build demo test fuzz static-programs bench bench-modem deb manuals install clean

# Debian's packages alone (the demo needs no more); `setup` adds the tests' Python tools.
packages:
	@missing=$$(for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

setup: packages
	@[ -x $(VENV)/bin/python ] || /usr/bin/python3 -m venv $(VENV)
	@$(VENV)/bin/python -c "import openapi_spec_validator, yaml" 2>/dev/null || \
		$(VENV)/bin/python -m pip install -q openapi-spec-validator pyyaml
	@$(VENV)/bin/python -c "import slixmpp; assert slixmpp.__version__ == '1.8.5'" 2>/dev/null || \
		$(VENV)/bin/python -m pip install -q slixmpp==1.8.5
	@# The Python client, editable: the tests use clients/python as it is now.
	@$(VENV)/bin/python -c "import nearby, dbus_fast" 2>/dev/null || \
		$(VENV)/bin/python -m pip install -q dbus-fast==5.2.0 -e ./clients/python

build: setup
	$(SWIFT) build

# Only the four programs the demo runs (not the tests, the fuzz harnesses or
# the benchmark), quietly: errors only, not the progress or the warnings
# SwiftPM prints about dependencies' files. A second run builds nothing.
demo: packages
	@for p in $(PROGRAMS); do echo "building $$p"; $(SWIFT) build -q --product $$p || exit 1; done
	dist/demo.sh .build/debug

# The fuzz harnesses' committed seeds, replayed through their properties
# (Sources/*Fuzz/README.md): a few seconds each.
REPLAY := timeout 300

# How many tests run at once. Swift Testing's default is every test at once:
# on two cores, hundreds of tests that start daemons, servers and PostgreSQL
# clusters starved one another until their waits ran out (a 100 ms timer
# firing 8 s late, suites past their time limits). At 12 the whole run
# passes on two cores with another build beside it.
TEST_WIDTH ?= 12

test: setup
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build --experimental-maximum-parallelization-width $(TEST_WIDTH)
	$(REPLAY) .build/debug/xmpp-fuzz Sources/XMPPFuzz/corpus
	$(REPLAY) .build/debug/ccs-fuzz Sources/CCSFuzz/corpus
	$(REPLAY) .build/debug/server-fuzz Sources/ServerFuzz/corpus
	$(REPLAY) .build/debug/storage-fuzz Sources/StorageFuzz/corpus
	$(REPLAY) .build/debug/air-fuzz Sources/AirFuzz/corpus
	$(REPLAY) .build/debug/hci-fuzz Sources/HCIFuzz/corpus
	$(REPLAY) .build/debug/dbus-fuzz Sources/DBusFuzz/corpus
	$(REPLAY) .build/debug/config-fuzz Sources/ConfigFuzz/corpus
	$(REPLAY) .build/debug/modem-fuzz Sources/ModemFuzz/corpus
	$(VENV)/bin/python -c "import yaml; from openapi_spec_validator import validate; validate(yaml.safe_load(open('doc/server-api/openapi.yaml')))"
	@echo "doc/server-api/openapi.yaml: valid OpenAPI"
	$(SWIFT) package dump-package | $(VENV)/bin/python Tests/docs/check_docs.py

# The fuzz harnesses (Sources/*Fuzz/README.md) built with libFuzzer and
# AddressSanitizer into .build-fuzz, each run for FUZZ_SECONDS from its seeds;
# what they find new is kept in .build-fuzz/corpus, and a finding (a crash,
# a hang, an allocation over the limits) stops the run with its input saved
# as .build-fuzz/crash-* (or leak-, timeout-, oom-).
FUZZ_SECONDS ?= 60
# libFuzzer's random seed: the same mutations on every run, so a finding in CI
# is found again by `make fuzz` here; another seed explores elsewhere.
FUZZ_SEED ?= 1
FUZZ_HARNESSES := beacons-fuzz xmpp-fuzz ccs-fuzz server-fuzz storage-fuzz air-fuzz hci-fuzz dbus-fuzz config-fuzz modem-fuzz
FUZZ_FLAGS := -Xswiftc -sanitize=fuzzer,address -Xswiftc -DLIBFUZZER
FUZZ_RUN = -seed=$(FUZZ_SEED) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 \
	-artifact_prefix=.build-fuzz/

fuzz: setup
	$(SWIFT) build --product beacons-fuzz
	for p in $(FUZZ_HARNESSES); do \
		$(SWIFT) build -c debug --scratch-path .build-fuzz --product $$p $(FUZZ_FLAGS) || exit 1; \
	done
	for c in beacons xmpp ccs server storage air hci dbus config modem; do mkdir -p .build-fuzz/corpus/$$c; done
	.build/debug/beacons-fuzz --write-seeds .build-fuzz/corpus/beacons
	.build-fuzz/debug/beacons-fuzz -dict=Sources/BeaconsFuzz/beacons.dict -max_len=64 $(FUZZ_RUN) .build-fuzz/corpus/beacons
	.build-fuzz/debug/xmpp-fuzz -dict=Sources/XMPPFuzz/xmpp.dict -max_len=4096 $(FUZZ_RUN) \
		.build-fuzz/corpus/xmpp Sources/XMPPFuzz/corpus
	.build-fuzz/debug/ccs-fuzz -dict=Sources/CCSFuzz/ccs.dict -max_len=8192 $(FUZZ_RUN) \
		.build-fuzz/corpus/ccs Sources/CCSFuzz/corpus
	.build-fuzz/debug/server-fuzz -dict=Sources/ServerFuzz/server.dict -max_len=8192 $(FUZZ_RUN) \
		.build-fuzz/corpus/server Sources/ServerFuzz/corpus
	.build-fuzz/debug/storage-fuzz -dict=Sources/StorageFuzz/storage.dict -max_len=1024 $(FUZZ_RUN) \
		.build-fuzz/corpus/storage Sources/StorageFuzz/corpus
	.build-fuzz/debug/air-fuzz -dict=Sources/AirFuzz/air.dict -max_len=16384 $(FUZZ_RUN) \
		.build-fuzz/corpus/air Sources/AirFuzz/corpus
	.build-fuzz/debug/hci-fuzz -dict=Sources/HCIFuzz/hci.dict -max_len=300 $(FUZZ_RUN) \
		.build-fuzz/corpus/hci Sources/HCIFuzz/corpus
	.build-fuzz/debug/dbus-fuzz -dict=Sources/DBusFuzz/dbus.dict -max_len=4096 $(FUZZ_RUN) \
		.build-fuzz/corpus/dbus Sources/DBusFuzz/corpus
	LSAN_OPTIONS=suppressions=Sources/ConfigFuzz/lsan.supp .build-fuzz/debug/config-fuzz -dict=Sources/ConfigFuzz/config.dict -max_len=8192 $(FUZZ_RUN) \
		.build-fuzz/corpus/config Sources/ConfigFuzz/corpus
	.build-fuzz/debug/modem-fuzz -max_len=65536 $(FUZZ_RUN) .build-fuzz/corpus/modem Sources/ModemFuzz/corpus

# The packages nearbyd, nearby-server and nearby-tools (debian/), built with
# debhelper from a static-Swift release build (.build-static, as the rig's)
# into .build/debian, and checked by lintian: an error fails the build.
deb: PACKAGES += debhelper dpkg-dev lintian
deb: setup
	rm -rf .build/debian
	# debhelper's stamp of the last build would skip building the programs
	# again. (dh_clean would remove it too, and also every *.orig, *~ and
	# *-stamp file in the tree.)
	rm -f debian/debhelper-build-stamp
	SWIFT=$(SWIFT) debian/rules binary
	lintian --fail-on error .build/debian/*.deb

# Release builds with the Swift runtime linked in statically, in .build-static:
# what the packages hold (debian/rules builds them here) and what the
# benchmarks measure. Linked dynamically, each call into the runtime
# (reference counts, exclusivity checks, hashing) goes through the PLT and its
# thread-local state through __tls_get_addr: nearbyd spends about 4 % more per
# D-Bus call (doc/performance.md).
STATIC_PROGRAMS := nearbyd nearbyctl nearby-server nearby-air nearby-modem
static-programs:
	for p in $(STATIC_PROGRAMS); do \
		$(SWIFT) build -c release --static-swift-stdlib --scratch-path .build-static --product $$p || exit 1; \
	done

# The soak's devices (bench/soak_devices.py) talk HTTP and WebSocket through aiohttp.
bench: PACKAGES += python3-aiohttp nginx
bench: STATIC_PROGRAMS := nearbyd nearby-server nearby-air
bench: setup static-programs
	$(SWIFT) build -c release --product nearby-bench
	bench/reference/build.sh
	.build/release/nearby-bench all --bin .build-static/release --reference bench/reference/bin

bench-modem: setup
	bench/modem-compare

# nearby-server alone under load (about 10 minutes; also in `bench`): its
# devices are nearby-load (SwiftNIO, built with nearby-bench), its
# application server and floors bench/server_load.py (Python, no package
# beyond the standard library), and its PostgreSQL runs use postgresql's
# pgbench and psql. BENCH_SERVER_ARGS picks what to run, e.g.
# `--parts upstream` (nearby-bench server --help).
BENCH_SERVER_ARGS ?=
.PHONY: bench-server
bench-server: PACKAGES += nginx
bench-server: STATIC_PROGRAMS := nearby-server
bench-server: setup static-programs
	$(SWIFT) build -c release --product nearby-bench
	.build/release/nearby-bench server --bin .build-static/release $(BENCH_SERVER_ARGS)

# The manual pages, from each program's --help (swift-argument-parser's
# generate-manual), into .build/man, mended where that mdoc is not roff: a
# blank line between paragraphs becomes .Pp (groff warns, and lintian with
# it), and a text line that starts with an apostrophe, which roff would take
# for a request and drop, gets the zero-width escape \& in front. The
# plugin builds every product to ask it for --help; in debug, the build
# `make test` already made (CI: 30 s instead of a second release build of
# everything, 24 minutes on CI's machine): --help is the same in either.
MANUALS := nearbyd nearbyctl nearby-server nearby-air nearby-modem
manuals:
	$(SWIFT) package --allow-writing-to-package-directory generate-manual --configuration debug
	mkdir -p .build/man
	for p in $(MANUALS); do \
		sed -e 's/^$$/.Pp/' -e "s/^'/\\\\\&'/" .build/plugins/GenerateManual/outputs/$$p/$$p.1 >.build/man/$$p.1 || exit 1; \
	done

install: manuals
	$(SWIFT) build -c release
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	for p in $(PROGRAMS); do \
		install -m 0755 .build/release/$$p $(DESTDIR)$(PREFIX)/bin/$$p; \
		install -m 0644 .build/man/$$p.1 $(DESTDIR)$(PREFIX)/share/man/man1/$$p.1; \
	done
	install -D -m 0644 systemd/nearbyd.service $(DESTDIR)$(PREFIX)/lib/systemd/system/nearbyd.service
	install -D -m 0644 systemd/nearby-server.service $(DESTDIR)$(PREFIX)/lib/systemd/system/nearby-server.service
	install -D -m 0644 dbus-policy/org.nearbyd.conf $(DESTDIR)$(PREFIX)/share/dbus-1/system.d/org.nearbyd.conf
	install -D -m 0644 dbus-policy/org.nearbyd.service $(DESTDIR)$(PREFIX)/share/dbus-1/system-services/org.nearbyd.service
	install -D -m 0644 dist/sysusers.d/nearbyd.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/nearbyd.conf
	install -D -m 0644 dist/sysusers.d/nearby-server.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/nearby-server.conf
	# The configuration files are the administrator's once installed: an upgrade leaves them.
	[ -e $(DESTDIR)/etc/nearbyd/nearbyd.conf ] || install -D -m 0644 dist/nearbyd.conf $(DESTDIR)/etc/nearbyd/nearbyd.conf
	# It may hold the database's password: 0640, for the group nearby-server (doc/installation.md).
	[ -e $(DESTDIR)/etc/nearby-server/nearby-server.conf ] || \
		install -D -m 0640 dist/nearby-server.conf $(DESTDIR)/etc/nearby-server/nearby-server.conf
	install -d $(DESTDIR)$(PREFIX)/share/doc/nearbyd
	install -m 0644 doc/*.md $(DESTDIR)$(PREFIX)/share/doc/nearbyd/
	install -D -m 0644 doc/server-api/openapi.yaml $(DESTDIR)$(PREFIX)/share/doc/nearbyd/server-api/openapi.yaml
	install -D -m 0644 doc/nearby-server.md $(DESTDIR)$(PREFIX)/share/doc/nearby-server/nearby-server.md

clean:
	rm -rf .build

# The rig (Tests/rig/README.md): nearbyd against a real bluetoothd on two
# virtual controllers and a real ALSA loopback card, in a QEMU VM; and the
# packages installed on that VM booted with systemd, so the packages come
# first. Debian 12, as root or with sudo.
.PHONY: rig
rig: deb
	SWIFT=$(SWIFT) Tests/rig/run
