//! HTTPS: `--tls-cert-file` / `--tls-key-file` with certificates this test makes (a CA
//! and a server certificate for 127.0.0.1, by rcgen). The same answers as over HTTP,
//! streams included; certificates rotate without a restart (file change and SIGHUP); a
//! pair that does not load is a start-up error naming the file, and at run time leaves
//! the certificate in use in place.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Spawned;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use serde_json::{Value, json};

/// A CA and a server certificate it signed, as PEM.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("sluice test CA {name}"));
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn dir(test: &str) -> PathBuf {
    let d = common::scratch("tls").join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes the pair where the server reads it (the key first: the server reloads when
/// either file changes, and a half-written pair only fails to load).
fn install(p: &Pki, dir: &Path) {
    std::fs::write(dir.join("key.pem"), &p.key).unwrap();
    std::fs::write(dir.join("cert.pem"), &p.cert).unwrap();
}

/// A client trusting only `ca`, with no connection pool (each request a new handshake).
fn client(ca: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

fn https(base: &str) -> String {
    base.replacen("http://", "https://", 1)
}

async fn serve_tls(dir: &Path, ca: &str) -> (Spawned, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let s = Spawned::start(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "512",
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
        ],
        &[],
    );
    let base = https(&s.base);
    let c = client(ca);
    for _ in 0..1200 {
        if let Ok(r) = c.get(format!("{base}/ready")).send().await
            && r.status() == 200
        {
            return (s, base);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not ready over HTTPS: {:?}", s.log());
}

/// Status and JSON body of a POST.
async fn post(c: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let r = c.post(url).json(body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The text of a streamed completion, and whether it ended with `[DONE]`.
async fn streamed(c: &reqwest::Client, base: &str) -> (String, bool) {
    let body = json!({"prompt": "The river", "max_tokens": 12, "temperature": 0, "stream": true});
    let r = c
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let raw = common::sse::body(r).await.unwrap();
    let (values, done) = common::sse::chunks(&raw);
    let text = values
        .iter()
        .map(|v| v["choices"][0]["text"].as_str().unwrap_or_default())
        .collect();
    (text, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_what_http_serves() {
    let d = dir("same");
    let p = pki("same");
    install(&p, &d);
    let (tls, base) = serve_tls(&d, &p.ca).await;
    let plain = Spawned::ready(&["serve", "--slots", "2", "--context", "512"], &[]).await;
    let (sc, pc) = (client(&p.ca), reqwest::Client::new());
    let ask = json!({"prompt": "The river", "max_tokens": 12, "temperature": 0});
    let bad = json!({"prompt": "The river", "max_tokens": -3});
    for body in [&ask, &bad] {
        let over_tls = post(&sc, &format!("{base}/v1/completions"), body).await;
        let over_tcp = post(&pc, &format!("{}/v1/completions", plain.base), body).await;
        assert_eq!(over_tls.0, over_tcp.0, "{body}");
        if over_tls.0 == 200 {
            assert_eq!(
                over_tls.1["choices"][0]["text"],
                over_tcp.1["choices"][0]["text"]
            );
        } else {
            assert_eq!(over_tls.1["error"], over_tcp.1["error"]);
        }
    }
    let (a, done_a) = streamed(&sc, &base).await;
    let (b, done_b) = streamed(&pc, &plain.base).await;
    assert!(done_a && done_b);
    assert_eq!(a, b);
    assert!(!a.is_empty());
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let r = pc.get(format!("{}/health", tls.base)).send().await;
    assert!(r.is_err() || r.unwrap().status() != 200);
    // Nor does a client that does not trust the certificate.
    let stranger = client(&pki("stranger").ca);
    assert!(stranger.get(format!("{base}/health")).send().await.is_err());
    drop(tls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_without_a_restart() {
    let d = dir("rotate");
    let (one, two, three) = (pki("one"), pki("two"), pki("three"));
    install(&one, &d);
    let (server, base) = serve_tls(&d, &one.ca).await;
    let health = |ca: &str| {
        let c = client(ca);
        let url = format!("{base}/health");
        async move { c.get(url).send().await.is_ok_and(|r| r.status() == 200) }
    };
    // Rotation by file change: new handshakes present the new certificate.
    install(&two, &d);
    let mut rotated = false;
    for _ in 0..100 {
        if health(&two.ca).await {
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated, "{:?}", server.log());
    assert!(!health(&one.ca).await, "the old certificate is gone");
    // A key that is not the certificate's: logged, and the certificate in use stays.
    std::fs::write(d.join("key.pem"), &three.key).unwrap();
    let mut refused = false;
    for _ in 0..100 {
        if server
            .log()
            .iter()
            .any(|l| l.contains("TLS certificate not reloaded"))
        {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "{:?}", server.log());
    assert!(health(&two.ca).await, "the certificate in use stays");
    // SIGHUP reloads at once (the process lives on).
    install(&two, &d);
    let reloads = |s: &Spawned| {
        s.log()
            .iter()
            .filter(|l| l.contains("TLS certificate reloaded") && l.contains("SIGHUP"))
            .count()
    };
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut hup = false;
    for _ in 0..100 {
        if reloads(&server) > 0 {
            hup = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(hup, "{:?}", server.log());
    assert!(health(&two.ca).await);
}

#[test]
fn a_pair_that_does_not_load_stops_the_server_by_name() {
    let d = dir("start");
    let (p, other) = (pki("start"), pki("other"));
    install(&p, &d);
    std::fs::write(d.join("other-key.pem"), &other.key).unwrap();
    let cert = d.join("cert.pem");
    let missing = d.join("missing.pem");
    let (key, other_key) = (d.join("key.pem"), d.join("other-key.pem"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--tls-cert-file", cert.to_str().unwrap()],
            "--tls-key-file",
        ),
        (
            vec![
                "--tls-cert-file",
                missing.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
            ],
            "missing.pem",
        ),
        (
            vec![
                "--tls-cert-file",
                cert.to_str().unwrap(),
                "--tls-key-file",
                other_key.to_str().unwrap(),
            ],
            "other-key.pem",
        ),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["serve", "--port", "0"];
        args.extend(flags);
        let (ok, _, err) = common::run_sluice(&args, &[("RUST_LOG", "off")]);
        assert!(!ok, "{args:?} starts");
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}
