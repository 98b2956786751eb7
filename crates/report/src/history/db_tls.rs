//! TLS for `--db`, with `sslmode` and `sslrootcert` as libpq reads them (the URL's query, else
//! `PGSSLMODE` and `PGSSLROOTCERT`): `disable`, `allow`, `prefer` (the default: TLS when the
//! server offers it, else plain), `require` (TLS, the certificate not checked), `verify-ca`
//! (its chain checked against the roots) and `verify-full` (the chain and the host name). The
//! roots are `sslrootcert`'s PEM file, else `~/.postgresql/root.crt` when present (libpq's
//! default), else the system's (`sslrootcert=system`). As in libpq, a root file given or
//! present makes `prefer` and `require` check the chain too. tokio-postgres reads only
//! `disable`, `prefer` and `require`, so both keys are taken off the URL before it is parsed.
//! In every mode that requires TLS, a server that does not offer it is refused before any
//! password is sent.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS settings of one `--db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert` as given (a path or `system`), if any.
    pub rootcert: Option<String>,
}

/// Why TLS for the database could not be set up (before any connection).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsSetupError {
    #[error(
        "sslmode={0} is not one libpq knows: write disable, allow, prefer, require, verify-ca or verify-full"
    )]
    UnknownMode(String),
    #[error("sslrootcert {path}: {why}")]
    RootFile { path: String, why: String },
    #[error("no system root certificates found ({0} errors); give the CA with sslrootcert=FILE")]
    NoSystemRoots(usize),
    #[error("{roots}: {why}")]
    Verifier { roots: String, why: String },
    #[error("{0}")]
    Protocols(String),
}

/// Takes `sslmode` and `sslrootcert` off `url` (a `postgres://` URL's query, or a `key=value`
/// string), falling back to `PGSSLMODE` and `PGSSLROOTCERT`: the URL tokio-postgres may parse,
/// and the settings. An unknown `sslmode` is an error naming the ones there are.
pub(crate) fn split(url: &str) -> Result<(String, TlsSettings), TlsSetupError> {
    let (rest, pairs) = take_keys(url, &["sslmode", "sslrootcert"]);
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mode_text = pairs[0].clone().or_else(|| env("PGSSLMODE"));
    let mode = match mode_text.as_deref() {
        None => SslMode::Prefer,
        Some(m) => SslMode::parse(m).ok_or_else(|| TlsSetupError::UnknownMode(m.to_string()))?,
    };
    let rootcert = pairs[1].clone().or_else(|| env("PGSSLROOTCERT"));
    Ok((rest, TlsSettings { mode, rootcert }))
}

/// `url` without the `keys`, and each key's (last, percent-decoded) value.
fn take_keys(url: &str, keys: &[&str]) -> (String, Vec<Option<String>>) {
    let mut found = vec![None; keys.len()];
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (head, query, sep) = match (is_url, url.split_once('?')) {
        (true, Some((h, q))) => (h, q, '&'),
        (true, None) => return (url.to_string(), found),
        (false, _) => ("", url, ' '),
    };
    let mut kept = Vec::new();
    for part in query.split(sep).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match keys.iter().position(|key| *key == k.trim()) {
            Some(i) => found[i] = Some(percent_decode(v.trim())),
            None => kept.push(part),
        }
    }
    let rest = match (is_url, kept.is_empty()) {
        (true, true) => head.to_string(),
        (true, false) => format!("{head}?{}", kept.join("&")),
        (false, _) => kept.join(" "),
    };
    (rest, found)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|c| hex(*c)),
            b.get(i + 2).and_then(|c| hex(*c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the roots come from: a PEM file, or the system's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    File(PathBuf),
    System,
}

impl Roots {
    pub(crate) fn describe(&self) -> String {
        match self {
            Roots::File(p) => format!("the roots of {}", p.display()),
            Roots::System => "the system's roots".to_string(),
        }
    }
}

/// The roots to check the chain against, and whether `prefer`/`require` check it (a root file
/// given or present, as in libpq). `None`: the certificate is not checked.
pub(crate) fn roots_for(settings: &TlsSettings) -> Option<Roots> {
    let given = match settings.rootcert.as_deref() {
        Some("system") => Some(Roots::System),
        Some(p) => Some(Roots::File(PathBuf::from(p))),
        None => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
            .filter(|p| p.is_file())
            .map(Roots::File),
    };
    match settings.mode {
        SslMode::VerifyCa | SslMode::VerifyFull => Some(given.unwrap_or(Roots::System)),
        SslMode::Disable => None,
        SslMode::Allow | SslMode::Prefer | SslMode::Require => given,
    }
}

/// ring: built by the C compiler alone (aws-lc-rs, rustls's default, needs more of a
/// toolchain); it lacks only post-quantum key exchange, which rustls deprecates it for.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The connector for `settings`, with the roots it checks against (`None`: not checked).
pub(crate) fn connector(
    settings: &TlsSettings,
) -> Result<(tokio_postgres_rustls::MakeRustlsConnect, Option<Roots>), TlsSetupError> {
    let provider = provider();
    let roots = roots_for(settings);
    let verifier: Arc<dyn ServerCertVerifier> = match &roots {
        None => Arc::new(AnyCertificate(provider.clone())),
        Some(r) => {
            let store = Arc::new(load_roots(r)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                .build()
                .map_err(|e| TlsSetupError::Verifier {
                    roots: r.describe(),
                    why: e.to_string(),
                })?;
            if settings.mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Protocols(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok((tokio_postgres_rustls::MakeRustlsConnect::new(config), roots))
}

/// The certificates of `roots` (a file: at most 16 MiB, every PEM certificate in it).
fn load_roots(roots: &Roots) -> Result<RootCertStore, TlsSetupError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            let file = |why: String| TlsSetupError::RootFile {
                path: path.display().to_string(),
                why,
            };
            let f = servebench_model::results::rundir::open_regular(path, 16 << 20)
                .map_err(|e| file(e.to_string()))?;
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_reader_iter(std::io::Read::take(f, 16 << 20))
                    .collect::<Result<_, _>>()
                    .map_err(|e| file(e.to_string()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(file(
                    "no PEM certificate in it (a CA's -----BEGIN CERTIFICATE----- block)".into(),
                ));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsSetupError::NoSystemRoots(found.errors.len()));
            }
        }
    }
    Ok(store)
}

/// `require` without a root file: TLS whatever the certificate (libpq's behaviour), the
/// handshake's signatures still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked, the host name not. webpki checks the chain first, so a
/// name error means the chain was good.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_come_off_the_url_as_libpq_reads_them() {
        let (rest, s) = split(
            "postgres://u@h:5/db?application_name=x&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5/db?application_name=x");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.rootcert.as_deref(), Some("/tmp/ca.pem"));
        let (rest, s) = split("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("postgres://u@h/db", SslMode::Require)
        );
        let (rest, s) = split("host=h user=u sslmode=verify-ca").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("host=h user=u", SslMode::VerifyCa)
        );
        let err = split("postgres://h/db?sslmode=on").unwrap_err().to_string();
        assert!(
            err.contains("sslmode=on") && err.contains("verify-full"),
            "{err}"
        );
    }

    #[test]
    fn only_a_root_file_or_a_verify_mode_checks_the_certificate() {
        let s = |mode, rootcert: Option<&str>| TlsSettings {
            mode,
            rootcert: rootcert.map(str::to_string),
        };
        assert_eq!(
            roots_for(&s(SslMode::VerifyFull, Some("/ca.pem"))),
            Some(Roots::File("/ca.pem".into()))
        );
        assert_eq!(
            roots_for(&s(SslMode::VerifyCa, Some("system"))),
            Some(Roots::System)
        );
        assert_eq!(
            roots_for(&s(SslMode::Require, Some("/ca.pem"))),
            Some(Roots::File("/ca.pem".into()))
        );
        assert_eq!(roots_for(&s(SslMode::Disable, Some("/ca.pem"))), None);
    }
}
