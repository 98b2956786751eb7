//! JSON columns are `text` holding the JSON as the run directory had it (jsonb would reorder
//! keys and so the order settings are listed in); the `metrics` view casts them for queries.
//!
//! A history shared across machines in a PostgreSQL database the team already runs
//! (`--db postgres://...`): the same rows as the embedded index ([`super::index::RunRow`]),
//! in the tables the guide documents (`runs`, `points`, and the `metrics` view dashboards
//! read). Each `history` first brings the run directories it can see into the database
//! (a row whose stamp still matches is left alone), then builds from every run the database
//! holds, so one machine's history includes another's runs. A database that cannot be
//! reached or refuses the login is an error that names it: the history is never built from
//! part of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::index::{INDEX_VERSION, IndexUse, RunRow, dir_stamp};
use super::model::SkippedRun;
use super::source::{Budget, find_run_dirs, load_dir};
use crate::report::compare::LoadedRun;

/// The schema, as the guide documents it (docs/guide/history.md).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS servebench_history (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_dir text PRIMARY KEY,
    stamp text NOT NULL,
    experiment text NOT NULL,
    started_at text NOT NULL,
    status text NOT NULL,
    tool_version text NOT NULL,
    truncated_lines text NOT NULL,
    meta text NOT NULL
);
CREATE TABLE IF NOT EXISTS points (
    run_dir text NOT NULL REFERENCES runs (run_dir) ON DELETE CASCADE,
    position integer NOT NULL,
    point_id text NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (run_dir, position)
);
CREATE OR REPLACE VIEW metrics AS
    SELECT r.experiment, r.started_at, r.run_dir, p.point_id, p.record::jsonb -> 'values' AS point_values,
           m.key AS metric, (m.value ->> 'mean')::double precision AS mean,
           (m.value ->> 'ci95_low')::double precision AS ci95_low,
           (m.value ->> 'ci95_high')::double precision AS ci95_high,
           (m.value ->> 'count')::bigint AS count
    FROM runs r JOIN points p USING (run_dir), jsonb_each(p.record::jsonb -> 'metrics') m;
";

/// The first key of the advisory locks `history` takes (`pg_advisory_xact_lock(LOCK_SPACE,
/// 0)` for the tables, `(LOCK_SPACE, hashtext(run))` for a run's rows): "sb" in ASCII.
const LOCK_SPACE: i32 = 0x7362;

/// What the server said: its message, detail, hint and SQLSTATE, or the client's error with
/// its causes (`Connection refused`).
pub(crate) fn said(e: &postgres::Error) -> String {
    if let Some(d) = e.as_db_error() {
        let mut text = format!("the server said: {}: {}", d.severity(), d.message());
        if let Some(detail) = d.detail() {
            text = format!("{text} ({detail})");
        }
        if let Some(hint) = d.hint() {
            text = format!("{text}; hint: {hint}");
        }
        return format!("{text} [SQLSTATE {}]", d.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// Why the database could not give a history.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error(
        "--db {url}: not a PostgreSQL URL ({message}); write postgres://USER:PASSWORD@HOST:PORT/DATABASE"
    )]
    Url { url: String, message: String },
    /// The server could not be reached, or refused the login.
    #[error(
        "{url}: cannot connect: {message}; the history was not built (check the server and the login, or leave out --db to use the local index)"
    )]
    Connect { url: String, message: String },
    /// A statement failed.
    #[error("{url}: {message}; the history was not built")]
    Query { url: String, message: String },
    /// A newer servebench wrote the schema.
    #[error(
        "{url}: the history tables are version {found}, newer than this servebench's {INDEX_VERSION}; upgrade servebench"
    )]
    Newer { url: String, found: i32 },
    /// A row does not read back (damaged, or written by hand).
    #[error("{url}: run {run_dir}: {message}; the history was not built")]
    Row {
        url: String,
        run_dir: String,
        message: String,
    },
}

/// The URL without its credentials, for messages: the one redactor every writer applies.
pub fn shown(url: &str) -> String {
    servebench_model::redact::text(url).into_owned()
}

/// Brings the run directories under `paths` into the database at `url`, then reads every
/// run it holds.
pub fn load_dirs(
    paths: &[PathBuf],
    budget: &Budget,
    url: &str,
) -> Result<(Vec<LoadedRun>, Vec<SkippedRun>, IndexUse), DbError> {
    let shown_url = shown(url);
    let q = query_error(&shown_url);
    let mut client = connect(url, &shown_url)?;
    let mut usage = IndexUse::default();
    // Tables made and checked by one writer at a time: concurrent `CREATE TABLE IF NOT
    // EXISTS` on a fresh database race on the catalogue's keys.
    {
        let mut t = client.transaction().map_err(&q)?;
        t.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&LOCK_SPACE])
            .map_err(&q)?;
        t.batch_execute(SCHEMA).map_err(&q)?;
        check_version(&mut t, &shown_url, &mut usage)?;
        t.commit().map_err(&q)?;
    }
    let stamps: HashMap<String, String> = client
        .query("SELECT run_dir, stamp FROM runs", &[])
        .map_err(&q)?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();

    let (dirs, mut skipped) = find_run_dirs(paths, budget);
    let mut spent = 0u64;
    for dir in dirs {
        let key = dir.display().to_string();
        let Some(stamp) = dir_stamp(&dir) else {
            skipped.push(SkippedRun {
                path: key,
                why: "its files could not be looked at".to_string(),
            });
            continue;
        };
        if stamps.get(&key) == Some(&stamp) {
            usage.reused += 1;
            continue;
        }
        match load_dir(&dir, budget, &mut spent) {
            Ok(run) => {
                usage.read += 1;
                upsert(&mut client, &RunRow::of(&run, stamp)).map_err(&q)?;
            }
            Err(why) => skipped.push(SkippedRun {
                path: key,
                why: why.to_string(),
            }),
        }
    }
    let runs = read_runs(&mut client, &shown_url)?;
    Ok((runs, skipped, usage))
}

/// Turns a failed query into the error that names the database (`shown_url`, no password).
fn query_error(shown_url: &str) -> impl Fn(postgres::Error) -> DbError + '_ {
    move |e: postgres::Error| DbError::Query {
        url: shown_url.to_string(),
        message: said(&e),
    }
}

/// Connects to the database at `url` as `--db` does (TLS as its `sslmode` says), for the
/// history and for checking the connection it makes.
pub fn connect_url(url: &str) -> Result<postgres::Client, DbError> {
    connect(url, &shown(url))
}

/// Connects to the database at `url` (10 s to connect), its errors naming `shown_url`.
fn connect(url: &str, shown_url: &str) -> Result<postgres::Client, DbError> {
    use super::db_tls::SslMode;
    let bad_url = |message: String| DbError::Url {
        url: shown_url.to_string(),
        message,
    };
    let (rest, tls) = super::db_tls::split(url).map_err(|e| bad_url(e.to_string()))?;
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e: postgres::Error| bad_url(e.to_string()))?;
    config.connect_timeout(Duration::from_secs(10));
    if config.get_password().is_none()
        && let Some(password) = password_from_env(&config)
    {
        config.password(password);
    }
    let failed = |message: String| DbError::Connect {
        url: shown_url.to_string(),
        message,
    };
    if tls.mode == SslMode::Disable {
        config.ssl_mode(postgres::config::SslMode::Disable);
        return config
            .connect(postgres::NoTls)
            .map_err(|e| failed(said(&e)));
    }
    let (connector, roots) = super::db_tls::connector(&tls).map_err(|e| failed(e.to_string()))?;
    let checked = match &roots {
        Some(r) => format!("the certificate checked against {}", r.describe()),
        None => "the certificate not checked".to_string(),
    };
    let tls_failed = |e: postgres::Error| {
        failed(format!(
            "{} (sslmode={}, {checked})",
            said(&e),
            tls.mode.name()
        ))
    };
    if tls.mode == SslMode::Allow {
        // libpq's `allow`: plain first, TLS when the server refuses that.
        config.ssl_mode(postgres::config::SslMode::Disable);
        if let Ok(client) = config.connect(postgres::NoTls) {
            return Ok(client);
        }
    }
    // Required: a server that does not offer TLS is refused before any password is sent.
    config.ssl_mode(match tls.mode {
        SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
        _ => postgres::config::SslMode::Require,
    });
    config.connect(connector).map_err(tls_failed)
}

/// The password libpq would use when the URL has none: `PGPASSWORD`, else the matching line
/// of `PGPASSFILE` or `~/.pgpass` (ignored, as libpq does, when others may read it), so the
/// password need never be on the command line where `ps` shows it.
fn password_from_env(config: &postgres::Config) -> Option<Vec<u8>> {
    if let Some(p) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
        use std::os::unix::ffi::OsStrExt;
        return Some(p.as_bytes().to_vec());
    }
    let file = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))?;
    let text = read_pgpass(&file)?;
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_string(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config
        .get_user()
        .map(str::to_string)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_default();
    let db = config.get_dbname().map_or(user.clone(), str::to_string);
    pgpass_lookup(&text, [&host, &port, &db, &user]).map(String::into_bytes)
}

/// `.pgpass`'s text, when it is a regular file only its owner may read (at most 1 MiB).
fn read_pgpass(file: &std::path::Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let f = servebench_model::results::rundir::open_regular(file, 1 << 20).ok()?;
    if f.metadata().ok()?.permissions().mode() & 0o077 != 0 {
        servebench_model::console::errln(&format!(
            "warning: {}: others may read it, so it is ignored (as libpq does): chmod 0600",
            file.display()
        ));
        return None;
    }
    let mut text = String::new();
    f.take(1 << 20).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The password of the first `host:port:database:user:password` line whose fields match
/// `want` (`*` matches anything; `\:` and `\\` are a colon and a backslash).
pub(crate) fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields: Vec<String> = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        fields.last_mut().expect("one").push(n);
                    }
                }
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut().expect("one").push(c),
            }
        }
        if fields.len() == 5
            && fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
        {
            return fields.pop();
        }
    }
    None
}

/// Checks the index's version: a newer one is refused, a missing or older one emptied and
/// stamped with this one (said in `usage.rebuilt`).
fn check_version(
    client: &mut postgres::Transaction<'_>,
    shown_url: &str,
    usage: &mut IndexUse,
) -> Result<(), DbError> {
    let q = query_error(shown_url);
    let version: Option<i32> = client
        .query_opt("SELECT version FROM servebench_history LIMIT 1", &[])
        .map_err(&q)?
        .map(|r| r.get(0));
    match version {
        Some(v) if v == INDEX_VERSION as i32 => {}
        Some(v) if v > INDEX_VERSION as i32 => {
            return Err(DbError::Newer {
                url: shown_url.to_string(),
                found: v,
            });
        }
        found => {
            usage.rebuilt = Some(match found {
                None => "missing".to_string(),
                Some(v) => format!("written in index version {v}"),
            });
            client
                .batch_execute(
                    "DELETE FROM points; DELETE FROM runs; DELETE FROM servebench_history;",
                )
                .map_err(&q)?;
            client
                .execute(
                    "INSERT INTO servebench_history (version) VALUES ($1)",
                    &[&(INDEX_VERSION as i32)],
                )
                .map_err(&q)?;
        }
    }
    Ok(())
}

/// Reads every run the database holds, with its points in order.
fn read_runs(client: &mut postgres::Client, shown_url: &str) -> Result<Vec<LoadedRun>, DbError> {
    let q = query_error(shown_url);
    let mut points: HashMap<String, Vec<String>> = HashMap::new();
    for row in client
        .query(
            "SELECT run_dir, record FROM points ORDER BY run_dir, position",
            &[],
        )
        .map_err(&q)?
    {
        points.entry(row.get(0)).or_default().push(row.get(1));
    }
    let mut runs = Vec::new();
    for row in client
        .query(
            "SELECT run_dir, stamp, experiment, started_at, status, tool_version, truncated_lines, meta FROM runs",
            &[],
        )
        .map_err(&q)?
    {
        let run_dir: String = row.get(0);
        let bad = |message: String| DbError::Row {
            url: shown_url.to_string(),
            run_dir: run_dir.clone(),
            message,
        };
        let meta = serde_json::from_str(row.get(7)).map_err(|e| bad(format!("meta: {e}")))?;
        let truncated_lines = serde_json::from_str(row.get(6))
            .map_err(|e| bad(format!("truncated_lines: {e}")))?;
        let records = points
            .remove(&run_dir)
            .unwrap_or_default()
            .iter()
            .map(|text| serde_json::from_str(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("a point: {e}")))?;
        runs.push(
            RunRow {
                run_dir: run_dir.clone(),
                stamp: row.get(1),
                experiment: row.get(2),
                started_at: row.get(3),
                status: row.get(4),
                tool_version: row.get(5),
                truncated_lines,
                meta,
                points: records,
            }
            .into_run(),
        );
    }
    Ok(runs)
}

/// Writes one run's rows in one transaction (its old points replaced).
fn upsert(client: &mut postgres::Client, row: &RunRow) -> Result<(), postgres::Error> {
    let mut t = client.transaction()?;
    // One writer of a run's rows at a time: two that deleted its points at once would both
    // insert them (a duplicate key).
    t.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&LOCK_SPACE, &row.run_dir],
    )?;
    t.execute("DELETE FROM points WHERE run_dir = $1", &[&row.run_dir])?;
    let meta = serde_json::to_string(&row.meta).unwrap_or_default();
    let truncated = serde_json::to_string(&row.truncated_lines).unwrap_or_default();
    t.execute(
        "INSERT INTO runs (run_dir, stamp, experiment, started_at, status, tool_version, truncated_lines, meta)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (run_dir) DO UPDATE SET stamp = EXCLUDED.stamp, experiment = EXCLUDED.experiment,
           started_at = EXCLUDED.started_at, status = EXCLUDED.status, tool_version = EXCLUDED.tool_version,
           truncated_lines = EXCLUDED.truncated_lines, meta = EXCLUDED.meta",
        &[
            &row.run_dir,
            &row.stamp,
            &row.experiment,
            &row.started_at,
            &row.status,
            &row.tool_version,
            &truncated,
            &meta,
        ],
    )?;
    for (i, p) in row.points.iter().enumerate() {
        let record = serde_json::to_string(p).unwrap_or_default();
        t.execute(
            "INSERT INTO points (run_dir, position, point_id, record) VALUES ($1, $2, $3, $4)",
            &[&row.run_dir, &(i as i32), &p.id, &record],
        )?;
    }
    t.commit()
}

#[cfg(test)]
mod tests {
    #[test]
    fn pgpass_lines_match_as_libpq_reads_them() {
        let text = "# comment\nother:5432:*:u:no\nlocalhost:5432:db:u:pa\\:ss\n*:*:*:*:any\n";
        assert_eq!(
            super::pgpass_lookup(text, ["localhost", "5432", "db", "u"]).as_deref(),
            Some("pa:ss")
        );
        assert_eq!(
            super::pgpass_lookup(text, ["h", "1", "x", "y"]).as_deref(),
            Some("any")
        );
        assert_eq!(super::pgpass_lookup("a:b:c:d", ["a", "b", "c", "d"]), None);
    }
}
