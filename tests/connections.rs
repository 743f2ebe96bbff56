//! Connection abuse: idle sockets and slow-header clients cannot take the server down or
//! hold its resources for as long as they like, and connections over the cap are refused
//! at once (docs/ARCHITECTURE.md, "Connections").

mod common;

use std::time::{Duration, Instant};

use common::Spawned;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Sends a raw `GET /health` on `s`.
async fn send_health(s: &mut TcpStream) {
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
}

/// The start of the answer to a raw `GET /health` sent on `s` (one read).
async fn health_head(s: &mut TcpStream) -> String {
    send_health(s).await;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).to_string()
}

/// Everything the server sends on `s` until it closes it, which must be within 5 s.
async fn answer_until_closed(s: &mut TcpStream, what: &str) -> String {
    let mut answer = String::new();
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{what}: not answered and closed in {:?}: {answer:?}",
                t.elapsed()
            )
        })
        .unwrap();
    answer
}

/// Waits until the server closes `s` (a read returns 0 or fails), up to `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let end = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(end, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// 1,000 idle sockets and 100 that send their headers a byte at a time: meanwhile
/// `/health` answers at once and a completion succeeds; after the header timeout the
/// server has closed every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_header_sockets_are_closed_and_do_not_block_others() {
    let server = Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "256",
            "--header-read-timeout",
            "3",
            "--idle-timeout",
            "3",
        ],
        &[],
    )
    .await;
    let at = addr(&server.base);
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(&at).await.expect("connect"));
    }
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(&at).await.expect("connect");
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // The slow clients go on sending a byte every half second in the background.
    let dribble = tokio::spawn(async move {
        for _ in 0..20 {
            for s in &mut slow {
                let _ = s.write_all(b"X").await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        slow
    });

    let client = reqwest::Client::new();
    let t = Instant::now();
    let health = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let done: serde_json::Value = client
        .post(format!("{}/v1/completions", server.base))
        .json(&json!({"prompt": "Hello", "max_tokens": 4}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["usage"]["completion_tokens"], 4, "{done}");

    // 3 s after they opened (and whatever the slow ones keep sending), all are closed.
    for s in &mut idle {
        assert!(
            closed_within(s, Duration::from_secs(10)).await,
            "an idle socket stayed open"
        );
    }
    let mut slow = dribble.await.unwrap();
    for s in &mut slow {
        assert!(
            closed_within(s, Duration::from_secs(10)).await,
            "a slow-header socket stayed open"
        );
    }
    // A keep-alive connection left idle after its response is closed (`--idle-timeout`).
    let mut kept = TcpStream::connect(&at).await.unwrap();
    assert!(health_head(&mut kept).await.starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut kept, Duration::from_secs(10)).await);
    // And the server still serves.
    let ok = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

/// Over `--max-connections`, a new connection gets one request: a probe is answered, any
/// other request (or silence for half a second) gets a 503, and it is closed; once
/// connections close, new ones are served again.
#[tokio::test]
async fn connections_over_the_cap_are_refused_at_once() {
    let server = Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "256",
            "--max-connections",
            "8",
            "--header-read-timeout",
            "30",
        ],
        &[],
    )
    .await;
    let at = addr(&server.base);
    // Hold 8 connections, each proven accepted by a request answered on it (kept alive).
    // One refused while an earlier client's connection is still closing is retried; so is
    // one whose probe was answered over the cap (`connection: close`): it does not hold a
    // place, and the place it missed would free up later.
    let mut held = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while held.len() < 8 {
        assert!(Instant::now() < deadline, "could not hold 8 connections");
        let mut s = TcpStream::connect(&at).await.unwrap();
        let head = health_head(&mut s).await;
        if head.starts_with("HTTP/1.1 200")
            && !head.to_ascii_lowercase().contains("connection: close")
        {
            held.push(s);
        } else if head.starts_with("HTTP/1.1 200") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            assert!(head.starts_with("HTTP/1.1 503"), "{head}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The ninth, silent, is answered 503 within half a second and closed.
    let t = Instant::now();
    let mut extra = TcpStream::connect(&at).await.unwrap();
    let answer = answer_until_closed(&mut extra, "a silent connection over the cap").await;
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1") && answer.contains("too_many_connections"));
    // A client that sends its request first still reads the answer (no reset).
    let mut eager = TcpStream::connect(&at).await.unwrap();
    let body = r#"{"prompt":"Hi","max_tokens":4}"#;
    let post = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    eager.write_all(post.as_bytes()).await.unwrap();
    let answer = answer_until_closed(&mut eager, "a POST over the cap").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    // Probes are answered over the cap, within a second: an orchestrator never restarts a
    // server that is merely busy.
    for probe in ["/health", "/ready", "/metrics"] {
        let t = Instant::now();
        let mut s = TcpStream::connect(&at).await.unwrap();
        let get = format!("GET {probe} HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(get.as_bytes()).await.unwrap();
        let answer = answer_until_closed(&mut s, probe).await;
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{probe}: {:?}",
            t.elapsed()
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe}: {answer}");
    }
    // Close the held ones: the server serves again.
    drop(held);
    let client = reqwest::Client::new();
    let mut served = false;
    for _ in 0..100 {
        if let Ok(r) = client.get(format!("{}/health", server.base)).send().await
            && r.status() == 200
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        served,
        "the server did not serve again after connections closed"
    );
}

/// The three timeouts are separate: a kept-alive connection outlives the header timeout
/// while idle and serves its next request; a slow-header client is closed at the header
/// timeout; a body that does not arrive within `--body-read-timeout` gets 408 and the
/// connection closes; and an idle connection is closed at the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_body_and_idle_timeouts_are_separate() {
    let server = Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "256",
            "--header-read-timeout",
            "1",
            "--body-read-timeout",
            "1",
            "--idle-timeout",
            "30",
        ],
        &[],
    )
    .await;
    let at = addr(&server.base);
    let mut kept = TcpStream::connect(&at).await.unwrap();
    assert!(health_head(&mut kept).await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        health_head(&mut kept).await.starts_with("HTTP/1.1 200"),
        "an idle connection outlives the header timeout"
    );
    // Headers a byte at a time: closed about a second after they started.
    let mut slow = TcpStream::connect(&at).await.unwrap();
    let t = Instant::now();
    for b in b"GET /health ".iter() {
        if slow.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(closed_within(&mut slow, Duration::from_secs(5)).await);
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    // A body that stops halfway: 408 in OpenAI's shape, then the connection closes.
    let mut body = TcpStream::connect(&at).await.unwrap();
    let t = Instant::now();
    body.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"prompt\": \"Hel",
    )
    .await
    .unwrap();
    let answer = answer_until_closed(&mut body, "a slow body").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // On Anthropic's route, in Anthropic's shape.
    let mut body = TcpStream::connect(&at).await.unwrap();
    body.write_all(
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"messages\": [",
    )
    .await
    .unwrap();
    let answer = answer_until_closed(&mut body, "a slow body").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let json = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(json).expect("a JSON body");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "timeout_error", "{v}");
    // The server serves on.
    let mut again = TcpStream::connect(&at).await.unwrap();
    assert!(health_head(&mut again).await.starts_with("HTTP/1.1 200"));

    let quick = Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "256",
            "--header-read-timeout",
            "30",
            "--idle-timeout",
            "1",
        ],
        &[],
    )
    .await;
    let mut kept = TcpStream::connect(addr(&quick.base)).await.unwrap();
    assert!(health_head(&mut kept).await.starts_with("HTTP/1.1 200"));
    let t = Instant::now();
    assert!(closed_within(&mut kept, Duration::from_secs(5)).await);
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}
