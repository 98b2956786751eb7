# servebench tasks (https://github.com/casey/just). Plain cargo commands work too.

# Run the quickstart experiment on the built-in simulator.
quickstart:
    cargo run --release -- run experiments/quickstart.yaml

# The README's test command: format, lints, tests (installs sshd and Slurm once, as root).
test:
    [ -x /usr/sbin/sshd ] && [ -x /usr/sbin/slurmctld ] && [ -x /usr/bin/chromium ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update && apt-get install -y openssh-server procps slurm-wlm munge postgresql chromium)
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings
    cargo test

# The guide as a book (docs/guide/book.toml), from mdBook on crates.io.
book:
    command -v mdbook >/dev/null || cargo install mdbook --version 0.5.4 --locked
    mdbook build docs/guide

# Regenerate the checked-in JSON Schema after changing spec types.
schema:
    cargo run -- schema > schemas/experiment.schema.json
    cargo run -- schema report-model > schemas/report-model.schema.json
    cargo run -- schema compare-model > schemas/compare-model.schema.json

# Simulator timing drift at 1, 64 and 512 streams.
bench:
    cargo bench --bench sim_drift
