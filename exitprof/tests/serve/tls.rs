//! `serve --web.config.file`: TLS and basic auth in the exporter toolkit's format, against
//! Debian's Prometheus with a scrape configuration of its own (its CA, its user and password
//! file), a TLS client of the test's, and plain HTTP; a changed password taking effect without
//! a restart, a bad configuration refused at start and kept out on SIGHUP.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::{ClientConfig, RootCertStore, pki_types::ServerName};

use super::{
    prometheus::Prometheus,
    served::{Response, Served, exchange, parse_response},
    task_name,
};
use crate::support::{exitprof, require_root};

const USER: &str = "prometheus";
/// The cost of the test's bcrypt hashes (the exporter toolkit's examples use 10).
const COST: u32 = 10;
/// How long a changed file may take to apply: serve looks every 2 s.
const RELOAD_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let ca = certificates(dir.path());
    let web = dir.path().join("web.yml");
    write_web_config(&web, "first");

    // A bad file at start: status 2 and what is wrong, before anything is loaded.
    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, "basic_auth_users:\n  prometheus: hunter2\n").unwrap();
    let refused = exitprof()
        .args(["serve", "--web.config.file", bad.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "a bad web configuration:\n{stderr}");
    assert!(stderr.contains("bad.yml") && stderr.contains("not a bcrypt hash"), "{stderr}");

    let client = TlsClient::new(&ca);
    let served = Served::start_until(
        dir.path(),
        &["--comm", &task_name("t"), "--web.config.file", web.to_str().unwrap()],
        |addr| client.get(addr, "/healthz", None).is_ok_and(|r| r.status == 200),
    );
    let addr = served.addr;
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "first").unwrap();
    let prometheus = Prometheus::scraping(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: exitprof\n    scheme: https\n    \
             tls_config:\n      ca_file: {}\n    \
             basic_auth:\n      username: {USER}\n      password_file: {}\n    \
             static_configs:\n      - targets: ['{addr}']\n",
            dir.path().join("ca.crt").display(),
            password_file.display()
        ),
    );
    let up = r#"up{job="exitprof"}"#;
    prometheus.wait_for(up, |v| v == 1.0);
    prometheus.wait_for(r#"exitprof_exits_recorded_total{job="exitprof"}"#, |v| v >= 0.0);

    // Our own client: the right password, a wrong one, none.
    let status = |path: &str, password: Option<&str>| client.get(addr, path, password).unwrap();
    let metrics = status("/metrics", Some("first"));
    assert_eq!(metrics.status, 200);
    assert!(metrics.body.contains("exitprof_exits_recorded_total"), "{}", metrics.body);
    let wrong = status("/metrics", Some("second"));
    assert_eq!(wrong.status, 401, "a wrong password: {}", wrong.body);
    assert_eq!(status("/metrics", None).status, 401, "no password");
    assert_eq!(status("/healthz", None).status, 200, "/healthz tells nothing: no password");
    // Plain HTTP to the TLS port: no HTTP answer, the connection closed.
    let plain = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: exitprof\r\n\r\n");
    if let Ok(raw) = &plain {
        assert!(
            !raw.starts_with(b"HTTP/"),
            "plain HTTP answered: {:?}",
            String::from_utf8_lossy(raw)
        );
    }

    // A new password in the file: the old one refused, the new one let in, without a restart;
    // Prometheus fails with its old one, and scrapes again once its password file has the new.
    write_web_config(&web, "second");
    let changed = Instant::now();
    while status("/metrics", Some("second")).status != 200 {
        assert!(
            changed.elapsed() < RELOAD_WITHIN,
            "the new password not taken in {RELOAD_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("new password taken in {:.1} s", changed.elapsed().as_secs_f64());
    assert_eq!(status("/metrics", Some("first")).status, 401, "the old password still works");
    prometheus.wait_for(up, |v| v == 0.0);
    std::fs::write(&password_file, "second").unwrap();
    prometheus.wait_for(up, |v| v == 1.0);

    // A bad file on SIGHUP: logged, and the configuration in force kept.
    std::fs::write(&web, "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n")
        .unwrap();
    served.signal(libc::SIGHUP);
    let sent = Instant::now();
    while !served.stderr().contains("keeping the configuration in force") {
        assert!(sent.elapsed() < RELOAD_WITHIN, "no word of the bad file:\n{}", served.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served.stderr().contains("missing.crt"), "{}", served.stderr());
    assert_eq!(status("/metrics", Some("second")).status, 200, "the configuration in force");
    served.signal(libc::SIGTERM);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status}:\n{stderr}");
}

/// A CA, and a certificate it signed for localhost and 127.0.0.1 with its key, written in `dir`
/// (`ca.crt`, `server.crt`, `server.key`); returns the CA's certificate.
fn certificates(dir: &Path) -> rustls::pki_types::CertificateDer<'static> {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "exitprof test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    ca.der().clone()
}

/// The web configuration: TLS with the test's certificate (paths relative to the file), and
/// [`USER`] with `password`, written whole and renamed into place as a Secret's update is.
fn write_web_config(path: &Path, password: &str) {
    let hash = bcrypt::hash(password, COST).unwrap();
    let next = path.with_extension("new");
    std::fs::write(
        &next,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             min_version: TLS12\nbasic_auth_users:\n  {USER}: '{hash}'\n"
        ),
    )
    .unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// An HTTPS client that trusts the test's CA.
struct TlsClient(Arc<ClientConfig>);

impl TlsClient {
    fn new(ca: &rustls::pki_types::CertificateDer<'static>) -> Self {
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let config = ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Self(Arc::new(config))
    }

    /// `GET path` as [`USER`] with `password` (none without), over a connection of its own.
    fn get(
        &self,
        addr: SocketAddr,
        path: &str,
        password: Option<&str>,
    ) -> std::io::Result<Response> {
        let name = ServerName::try_from("localhost").unwrap();
        let connection =
            rustls::ClientConnection::new(self.0.clone(), name).map_err(std::io::Error::other)?;
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let authorization = password
            .map(|p| {
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{p}"));
                format!("Authorization: Basic {encoded}\r\n")
            })
            .unwrap_or_default();
        let started = Instant::now();
        tls.write_all(
            format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )?;
        let mut raw = Vec::new();
        match tls.read_to_end(&mut raw) {
            // A close without TLS's close_notify, once the answer is whole, is an end too.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            result => {
                result?;
            }
        }
        parse_response(raw, started.elapsed())
    }
}

#[expect(deprecated, reason = "serve's provider: ring's is deprecated only to steer to aws-lc-rs")]
fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}
