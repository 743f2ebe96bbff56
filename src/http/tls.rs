//! HTTPS: `--tls-cert-file` and `--tls-key-file` (PEM), served with rustls (ring). The
//! certificate is read again on SIGHUP and whenever either file changes (checked every
//! `WATCH_EVERY`), so certificates rotate without a restart; a pair that does not load
//! is logged and the one in use stays. HTTP/1.1 only, as over plain TCP.

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

pub use crate::config::TlsFiles;

/// How often the files are checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(2);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads and checks the pair: a chain, a key the provider can sign with, and that the
/// key is the certificate's.
pub fn read(files: &TlsFiles) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--tls-cert-file {}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert-file {}: no certificate in it",
            files.cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("--tls-key-file {}: {e}", files.key.display()))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        format!(
            "--tls-cert-file {} with --tls-key-file {}: {e}",
            files.cert.display(),
            files.key.display()
        )
    })
}

/// The certificate in use, swapped in place on reload.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// The handshake side of HTTPS, with the certificate it reloads.
#[derive(Clone)]
pub struct Tls {
    /// Accepts TLS connections.
    pub acceptor: TlsAcceptor,
    current: Arc<Current>,
    files: TlsFiles,
}

impl Tls {
    /// Loads the pair (an error names the file and the problem: a start-up error).
    pub fn new(files: &TlsFiles) -> Result<Self, String> {
        let current = Arc::new(Current(RwLock::new(Arc::new(read(files)?))));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            current,
            files: files.clone(),
        })
    }

    /// Reads the pair again; on success new handshakes use it.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = Arc::new(read(&self.files)?);
        *self.current.0.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// Reloads on SIGHUP and when either file's modification time or size changes, until
    /// the runtime stops.
    pub fn watch(&self) {
        let tls = self.clone();
        tokio::spawn(async move {
            let mut seen = stamps(&tls.files);
            let mut tick = tokio::time::interval(WATCH_EVERY);
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            loop {
                let why = tokio::select! {
                    _ = tick.tick() => {
                        let now = stamps(&tls.files);
                        if now == seen {
                            continue;
                        }
                        seen = now;
                        "the files changed"
                    }
                    Some(()) = async { match hup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    } } => "SIGHUP",
                };
                match tls.reload() {
                    Ok(()) => tracing::info!(why, "TLS certificate reloaded"),
                    Err(e) => {
                        tracing::error!(why, error = %e, "TLS certificate not reloaded; the old one stays")
                    }
                }
            }
        });
    }
}

/// What identifies a version of the two files.
fn stamps(files: &TlsFiles) -> [Option<(SystemTime, u64)>; 2] {
    let stamp = |p: &Path| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    [stamp(&files.cert), stamp(&files.key)]
}
