//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod golden;
pub mod sse;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sluice::engine::{EngineHandle, Loaded};

/// The default model, fetched by `scripts/fetch-model` (the test command runs it first).
pub fn model_path() -> PathBuf {
    std::env::var_os("SLUICE_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(sluice::config::default_model_path)
}

/// `tests/data`: the golden data the tests read (see its README).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// This test binary's scratch directory, `$TMPDIR/sluice-test-<name>-<pid>`. A test binary
/// cannot clean up when it exits (Rust drops no statics), so this first removes the
/// directories of earlier runs whose process is gone: one run's files stay at most (a
/// reload test's copies of the model are 190 MB).
pub fn scratch(name: &str) -> PathBuf {
    let tmp = std::env::temp_dir();
    let prefix = format!("sluice-test-{name}-");
    let me = std::process::id();
    // Whether a process is alive is read from /proc; elsewhere nothing is removed.
    if Path::new("/proc/self").exists() {
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(&prefix));
            let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if pid != me && !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("{prefix}{me}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The golden reference file for the default model.
pub fn reference() -> serde_json::Value {
    let p = data_dir().join("smollm2-q4_1.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("reference json parses")
}

/// The default model and its tokenizer.
pub fn load() -> Loaded {
    sluice::load_model(&model_path(), &Default::default())
        .unwrap_or_else(|e| panic!("{e:#}: run scripts/fetch-model before the tests"))
}

/// A prompt of exactly `n` tokens: `opening`, then `words` in an order `salt` picks, so
/// prompts with different salts share the opening's blocks and nothing after it.
pub fn text_prompt(
    tok: &sluice::tokenizer::Tokenizer,
    opening: &str,
    words: &[&str],
    n: usize,
    salt: usize,
) -> Vec<u32> {
    let mut text = String::from(opening);
    let mut i = salt;
    loop {
        text.push_str(words[i % words.len()]);
        text.push(' ');
        i = i * 7 + 3;
        let ids = tok.encode(&text).unwrap();
        if ids.len() >= n {
            return ids[..n].to_vec();
        }
    }
}

/// Token ids of a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

static ENGINE: OnceLock<EngineHandle> = OnceLock::new();

/// The engine behind the test server (to watch its slots).
pub fn engine() -> &'static EngineHandle {
    server();
    ENGINE.get().expect("server started")
}

/// A real sluice server on 127.0.0.1 with the real model, started once per test binary
/// on its own thread and runtime through `sluice::run_with`, the production entry point.
/// Returns its base URL once the model is loaded and warm.
pub fn server() -> &'static str {
    server_with(|_| {})
}

/// Like `server`, with flag changes (applied only by the first caller).
pub fn server_with(tweak: impl FnOnce(&mut sluice::config::ServeArgs)) -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let mut args = serve_args();
        tweak(&mut args);
        let config = args.config().expect("a valid test configuration");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let addr = listener.local_addr().expect("addr");
                let ready = move |s: &sluice::http::AppState| {
                    let _ = ENGINE.set(s.engine.clone());
                    let _ = tx.send(addr);
                };
                sluice::run_with(listener, config, std::future::pending(), ready)
                    .await
                    .expect("serve");
            });
        });
        let addr = rx.recv().expect("the test server loads its model");
        format!("http://{addr}")
    })
}

/// The flags tests start from: the default model, small limits.
pub fn serve_args() -> sluice::config::ServeArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: sluice::config::ServeArgs,
    }
    let mut args = Wrap::parse_from(["sluice"]).args;
    args.model = vec![model_path().display().to_string()];
    args.slots = 8;
    args.context = Some(1024);
    args.max_body_bytes = 64 * 1024;
    args
}

/// A `sluice serve` child process on a port of its own choosing. Dropping it kills the
/// process, so a failing test never leaves a server behind.
pub struct Spawned {
    child: Child,
    /// `http://127.0.0.1:PORT`, once the server listens.
    pub base: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Spawned {
    /// Starts `sluice <args>` with `--port 0` and `envs`, and waits until it listens (it
    /// logs its address; the model may still be loading).
    pub fn start(args: &[&str], envs: &[(&str, &str)]) -> Spawned {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(args)
            .args(["--port", "0"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let chosen = args.iter().any(|a| *a == "--model" || *a == "--models-dir");
        if !chosen && !envs.iter().any(|(k, _)| *k == "SLUICE_MODEL") {
            cmd.env("SLUICE_MODEL", model_path());
        }
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("sluice starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = address(&line) {
                        let _ = tx.send(addr);
                    }
                    lines.lock().unwrap().push(line);
                }
            });
        }
        let mut spawned = Spawned {
            child,
            base: String::new(),
            lines,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => spawned.base = format!("http://{addr}"),
            Err(_) => panic!("no address logged: {:?}", spawned.log()),
        }
        spawned
    }

    /// Starts the server as `start` does and waits until `/ready` answers 200.
    pub async fn ready(args: &[&str], envs: &[(&str, &str)]) -> Spawned {
        let s = Spawned::start(args, envs);
        for _ in 0..1200 {
            if let Ok(r) = reqwest::get(format!("{}/ready", s.base)).await
                && r.status() == 200
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("not ready after 120 s: {:?}", s.log());
    }

    /// Every line the process has written to stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "SIGTERM delivered");
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed when dropped (when its test fails too).
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `address=` field of the "listening" log line, text or JSON.
fn address(line: &str) -> Option<String> {
    if !line.contains("listening") {
        return None;
    }
    let line = strip_ansi(line);
    let at = line.find("address")? + "address".len();
    let rest = line[at..].trim_start_matches(['=', '"', ':']);
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    addr.contains(':').then_some(addr)
}

/// `line` without terminal colour codes.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs `sluice <args>` to completion: (exit success, stdout, stderr).
pub fn run_sluice(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("sluice runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// GET `url` and parse the JSON body.
pub async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url)
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON body")
}

/// POST `body` to `url` and parse the JSON answer.
pub async fn post_json(url: &str, body: &serde_json::Value) -> serde_json::Value {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON body")
}

/// A port on 127.0.0.1 that was free a moment ago (for programs that cannot be told to
/// pick their own and report it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The sum of every `/metrics` sample of `base` whose line starts with `series` (a name, or
/// a name with some of its labels) and contains each of `labels`.
pub async fn metric(base: &str, series: &str, labels: &[&str]) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("request")
        .text()
        .await
        .expect("text body");
    text.lines()
        .filter(|l| without_model(l).starts_with(series) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A sample line with its `model="..."` label taken out: every engine series carries one
/// (`series` in `metric` is named without it).
pub fn without_model(line: &str) -> String {
    let Some(start) = line.find("model=\"") else {
        return line.to_string();
    };
    let end = start + 7 + line[start + 7..].find('"').expect("a closed label") + 1;
    let (before, after) = (&line[..start], &line[end..]);
    match (before.ends_with('{'), after.strip_prefix(',')) {
        (_, Some(rest)) => format!("{before}{rest}"),
        (true, None) => format!("{}{}", &before[..before.len() - 1], &after[1..]),
        (false, None) => format!("{}{after}", &before[..before.len() - 1]),
    }
}

/// Runs `scripts/golden/<script> write DIR` with the tests' venv's Python (numpy, gguf;
/// `scripts/venv` makes it, `SLUICE_VENV` overrides it) into the scratch directory `name`,
/// and returns the directory: the tiny models the golden files were made from.
pub fn golden_write(script: &str, name: &str) -> PathBuf {
    let dir = scratch(name);
    let venv = std::env::var_os("SLUICE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/sluice/venv")
        });
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts/golden")
        .join(script);
    let out = Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg("write")
        .arg(&dir)
        .output()
        .expect("the venv's python runs (scripts/venv makes it)");
    assert!(
        out.status.success(),
        "{} write: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

/// The SHA-256 of a file, in hex.
pub fn sha256(p: &Path) -> String {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `error` objects among a raw SSE body's events, each event parsed as JSON: a model may
/// write the word "error" as content, so a text search would see errors that are not there.
pub fn sse_errors(raw: &str) -> Vec<serde_json::Value> {
    sse::events(raw)
        .iter()
        .filter_map(sse::Event::error)
        .collect()
}

/// A `kB` field of a /proc file (`"self/status"`, `"{pid}/smaps_rollup"`): `VmRSS`,
/// `AnonHugePages`. `None` when the file or the field cannot be read.
pub fn proc_kb(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
