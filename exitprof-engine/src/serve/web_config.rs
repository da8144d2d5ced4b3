//! `--web.config.file`: TLS and basic auth from a file in the web configuration format that
//! Prometheus's exporters share (the exporter toolkit's):
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # paths relative to this file's folder
//!   key_file: server.key
//!   client_ca_file: clients.crt    # optional: clients must then present a certificate it signed
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12             # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hashes
//! ```
//!
//! The file (and the files it names) are checked for changes every [`RECHECK`] and read again
//! on SIGHUP; a new configuration applies to the connections accepted and the requests received
//! from then on. A bad one at start ends serve with status 2; a bad one later is logged, and the
//! one in force is kept.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
    version,
};
use serde::Deserialize;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};
use tokio_rustls::TlsAcceptor;

use super::basic_auth::Users;

/// How often the files are looked at for a change.
pub const RECHECK: Duration = Duration::from_secs(2);

/// What a web configuration asks for: TLS, basic auth, both or neither.
#[derive(Default)]
pub struct WebConfig {
    pub tls: Option<TlsAcceptor>,
    pub users: Option<Arc<Users>>,
}

/// The file as written; fields the format has and exitprof does not are refused by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<ClientAuth>,
    min_version: Option<TlsVersion>,
    max_version: Option<TlsVersion>,
}

/// The exporter toolkit's names, Go's `tls.ClientAuthType`s. `RequestClientCert` and
/// `RequireAnyClientCert` take certificates that nothing verifies: they authenticate nobody, and
/// are refused.
#[derive(Clone, Copy, Deserialize, PartialEq, Eq)]
enum ClientAuth {
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

/// rustls speaks TLS 1.2 and 1.3; the format's TLS10 and TLS11 are refused.
#[derive(Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
enum TlsVersion {
    TLS12,
    TLS13,
}

impl WebConfig {
    /// Reads the file at `path` and the files it names.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: File = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{}: not a web configuration", path.display()))?;
        let folder = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|tls| tls.acceptor(folder))
            .transpose()
            .with_context(|| format!("{}: tls_server_config", path.display()))?;
        let users = file
            .basic_auth_users
            .map(Users::new)
            .transpose()
            .with_context(|| format!("{}: basic_auth_users", path.display()))?;
        Ok(Self { tls, users: users.map(Arc::new) })
    }

    /// How it reads in a log line.
    fn describe(&self) -> &'static str {
        match (self.tls.is_some(), self.users.is_some()) {
            (true, true) => "TLS and basic auth",
            (true, false) => "TLS",
            (false, true) => "basic auth, without TLS",
            (false, false) => "neither TLS nor basic auth",
        }
    }
}

impl TlsFile {
    /// The paths it names, relative ones in `folder` (the configuration's, as the exporter
    /// toolkit resolves them).
    fn files(&self, folder: &Path) -> Vec<PathBuf> {
        [Some(&self.cert_file), Some(&self.key_file), self.client_ca_file.as_ref()]
            .into_iter()
            .flatten()
            .map(|p| folder.join(p))
            .collect()
    }

    fn acceptor(self, folder: &Path) -> anyhow::Result<TlsAcceptor> {
        let (cert_file, key_file) = (folder.join(&self.cert_file), folder.join(&self.key_file));
        let chain = CertificateDer::pem_file_iter(&cert_file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .with_context(|| format!("reading certificates from {}", cert_file.display()))?;
        anyhow::ensure!(!chain.is_empty(), "{}: no certificate in it", cert_file.display());
        let key = PrivateKeyDer::from_pem_file(&key_file)
            .with_context(|| format!("reading a private key from {}", key_file.display()))?;
        let min = self.min_version.unwrap_or(TlsVersion::TLS12);
        let max = self.max_version.unwrap_or(TlsVersion::TLS13);
        anyhow::ensure!(min <= max, "min_version is above max_version");
        let versions: Vec<_> =
            [(TlsVersion::TLS12, &version::TLS12), (TlsVersion::TLS13, &version::TLS13)]
                .into_iter()
                .filter(|(v, _)| (min..=max).contains(v))
                .map(|(_, version)| version)
                .collect();
        // A CA and no policy: its clients are required, as the exporter toolkit does.
        let auth = match (self.client_auth_type, &self.client_ca_file) {
            (Some(auth), _) => auth,
            (None, Some(_)) => ClientAuth::RequireAndVerifyClientCert,
            (None, None) => ClientAuth::NoClientCert,
        };
        let builder = ServerConfig::builder_with_provider(Arc::new(crypto_provider()))
            .with_protocol_versions(&versions)?;
        let builder = match (auth, &self.client_ca_file) {
            (ClientAuth::NoClientCert, _) => builder.with_no_client_auth(),
            (_, None) => anyhow::bail!("client_auth_type verifies clients: give client_ca_file"),
            (auth, Some(ca_file)) => {
                let ca_file = folder.join(ca_file);
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(&ca_file)
                    .with_context(|| format!("reading {}", ca_file.display()))?
                {
                    let cert = cert.with_context(|| format!("reading {}", ca_file.display()))?;
                    roots.add(cert).with_context(|| format!("{}", ca_file.display()))?;
                }
                let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
                let verifier = if auth == ClientAuth::VerifyClientCertIfGiven {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(verifier.build()?)
            }
        };
        let mut config = builder.with_single_cert(chain, key).with_context(|| {
            format!("{} and {} do not make a key pair", cert_file.display(), key_file.display())
        })?;
        // serve speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// rustls on *ring*: it builds with a C compiler alone, where aws-lc-rs wants cmake and minutes
/// of build; what *ring* lacks is post-quantum key exchange, which a scrape of latencies does
/// not need.
#[expect(deprecated, reason = "ring's provider is deprecated only to steer to aws-lc-rs")]
fn crypto_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// What identifies a file's content without reading it: a rewrite, a rename over it or a
/// Kubernetes Secret's swapped symlink changes one of these.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

/// The stamps of the configuration and of the files it names (`None` for one that cannot be
/// read: a change too, when it comes back).
fn stamps(path: &Path) -> Vec<Option<Stamp>> {
    let named = fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_yaml_ng::from_str::<File>(&text).ok())
        .and_then(|file| file.tls_server_config)
        .map(|tls| tls.files(path.parent().unwrap_or(Path::new("."))))
        .unwrap_or_default();
    std::iter::once(path.to_owned())
        .chain(named)
        .map(|file| {
            fs::metadata(file).ok().map(|m| Stamp {
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
                ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            })
        })
        .collect()
}

/// The configuration at `path`, read now, and kept up to date by a task: on a change of its
/// files or SIGHUP, read again and published if good; if bad, logged and not published. Without
/// a file, neither TLS nor basic auth, and SIGHUP (`systemctl reload`) is only logged.
pub fn watched(path: Option<PathBuf>) -> anyhow::Result<watch::Receiver<Arc<WebConfig>>> {
    let mut hangups = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    let Some(path) = path else {
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                log::warn!("SIGHUP: no --web.config.file to read again");
            }
        });
        return Ok(watch::channel(Arc::new(WebConfig::default())).1);
    };
    let mut seen = stamps(&path);
    let config = WebConfig::load(&path)?;
    eprintln!("exitprof: {}: {}", path.display(), config.describe());
    let (publish, current) = watch::channel(Arc::new(config));
    tokio::spawn(async move {
        let mut checks = tokio::time::interval(RECHECK);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let asked = tokio::select! {
                _ = hangups.recv() => true,
                _ = checks.tick() => false,
            };
            let now = stamps(&path);
            if !asked && now == seen {
                continue;
            }
            seen = now;
            match WebConfig::load(&path) {
                Ok(config) => {
                    log::warn!("{}: read again: {}", path.display(), config.describe());
                    publish.send_replace(Arc::new(config));
                }
                Err(e) => log::error!("{e:#}; keeping the configuration in force"),
            }
        }
    });
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(dir: &Path, yaml: &str) -> anyhow::Result<WebConfig> {
        let path = dir.join("web.yml");
        fs::write(&path, yaml).unwrap();
        WebConfig::load(&path)
    }

    fn error(dir: &Path, yaml: &str) -> String {
        format!("{:#}", load(dir, yaml).err().unwrap())
    }

    /// A key pair and a CA's certificate, written in `dir`.
    fn key_pair(dir: &Path) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        fs::write(dir.join("server.crt"), cert.pem()).unwrap();
        fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        fs::write(dir.join("ca.crt"), cert.pem()).unwrap();
    }

    #[test]
    fn what_the_file_asks_for_is_loaded() {
        let dir = tempfile::tempdir().unwrap();
        key_pair(dir.path());
        let hash = bcrypt::hash("pw", 4).unwrap();
        let both = load(
            dir.path(),
            &format!(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
                 basic_auth_users:\n  prom: '{hash}'\n"
            ),
        )
        .unwrap();
        assert_eq!(both.describe(), "TLS and basic auth");
        let mutual = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                      client_ca_file: ca.crt\n  min_version: TLS13\n";
        assert_eq!(load(dir.path(), mutual).unwrap().describe(), "TLS");
        assert_eq!(load(dir.path(), "{}\n").unwrap().describe(), "neither TLS nor basic auth");
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        key_pair(dir.path());
        let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
        for (yaml, expected) in [
            ("tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n", "nope.crt"),
            ("tls_server_config:\n  cert_file: server.crt\n  key_file: ca.crt\n", "private key"),
            (&format!("{tls}  min_version: TLS10\n"), "unknown variant `TLS10`"),
            (&format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"), "above max_version"),
            (&format!("{tls}  client_auth_type: RequireAnyClientCert\n"), "unknown variant"),
            (&format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"), "client_ca_file"),
            ("basic_auth_users:\n  prom: hunter2\n", "not a bcrypt hash"),
            ("basic_auth_user:\n  prom: x\n", "unknown field `basic_auth_user`"),
            ("- a list\n", "not a web configuration"),
        ] {
            let message = error(dir.path(), yaml);
            assert!(message.contains(expected), "{yaml:?}: {message}");
        }
    }

    /// A rewrite of the configuration or of a file it names changes the stamps.
    #[test]
    fn a_rewrite_changes_the_stamps() {
        let dir = tempfile::tempdir().unwrap();
        key_pair(dir.path());
        let path = dir.path().join("web.yml");
        fs::write(&path, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
            .unwrap();
        let before = stamps(&path);
        assert_eq!(before.len(), 3);
        assert!(before.iter().all(Option::is_some));
        assert_eq!(stamps(&path), before);
        let key = fs::read(dir.path().join("server.key")).unwrap();
        fs::write(dir.path().join("server.key.new"), key).unwrap();
        fs::rename(dir.path().join("server.key.new"), dir.path().join("server.key")).unwrap();
        assert_ne!(stamps(&path), before, "a key renamed over the old one");
    }
}
