//! The model against `tests/data/smollm2-q4_1.json`: llama.cpp's tokenisation and chat
//! rendering, and greedy runs through the engine close to the independent f32 reference.

mod common;

use std::process::Command;

use common::golden::{self, entries};
use common::{ids, load, reference};
use sluice_kernels::Simd;

#[test]
fn tokenisation_and_chat_template_match_llama_cpp() {
    golden::tokenisation_matches(&load().tokenizer, &reference());
}

#[test]
fn a_tokenizer_json_gives_the_same_ids() {
    let tok = load().tokenizer;
    let path = common::scratch("reference").join("tokenizer.json");
    std::fs::write(&path, tok.to_json().unwrap()).unwrap();
    let file = sluice::engine::GgufFile::open(&common::model_path()).unwrap();
    let from_json = sluice::tokenizer::Tokenizer::from_gguf(&file, Some(&path), None)
        .expect("tokenizer.json loads");
    let _ = std::fs::remove_file(&path);
    let r = reference();
    for (sec, e) in entries(&r) {
        if sec == "raw" {
            let text = e["prompt"].as_str().unwrap();
            assert_eq!(
                from_json.encode(text).unwrap(),
                ids(&e["tokens"]),
                "{text:?}"
            );
        }
    }
    assert_eq!(from_json.end_ids, tok.end_ids);
    let bad = std::env::temp_dir().join("sluice-no-such-tokenizer.json");
    assert!(sluice::tokenizer::Tokenizer::from_gguf(&file, Some(&bad), None).is_err());
}

#[test]
fn greedy_runs_are_close_to_the_reference_alone_and_batched() {
    let alone_only = std::env::var_os("SLUICE_REFERENCE_ALONE_ONLY").is_some();
    golden::greedy_close(&common::model_path(), "smollm2-q4_1.json", alone_only);
}

/// The same greedy runs with every other kernel path forced (`SLUICE_KERNEL`), in a child
/// process of this test binary, since the level is fixed once per process.
#[test]
fn every_kernel_path_stays_close_to_the_reference() {
    if std::env::var_os("SLUICE_KERNEL").is_some() {
        return; // already a child
    }
    // The AVX2 level without `vpdpbusd`, and with it where the CPU has a form of it (the
    // VEX one of AVX-VNNI, else the EVEX one of AVX-512 VNNI with VL).
    let vnni = if std::is_x86_feature_detected!("avxvnni") {
        Some("vex")
    } else if std::is_x86_feature_detected!("avx512vnni")
        && std::is_x86_feature_detected!("avx512vl")
    {
        Some("evex")
    } else {
        None
    };
    let mut paths = vec![(Simd::Avx2, "0", "off")];
    if let Some(form) = vnni {
        paths.push((Simd::Avx2, "1", form));
    }
    paths.push((Simd::Portable, "0", "off"));
    for (level, switch, form) in paths {
        // The parent run covers the detected level with its default form.
        let default_form = if vnni == Some("vex") { "vex" } else { "off" };
        let detected = Simd::detected();
        if level as u8 > detected as u8
            || (level == detected && (level != Simd::Avx2 || form == default_form))
        {
            continue;
        }
        let name = format!("{level:?}").to_lowercase();
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "greedy_runs_are_close_to_the_reference_alone_and_batched",
                "--nocapture",
            ])
            .env("SLUICE_KERNEL", &name)
            .env("SLUICE_AVX2_VNNI", switch)
            .env("SLUICE_REFERENCE_ALONE_ONLY", "1")
            .output()
            .expect("test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("--- SLUICE_KERNEL={name} SLUICE_AVX2_VNNI={switch}\n{stdout}");
        assert!(out.status.success(), "{name}: {stdout}");
        let want = if level == Simd::Portable {
            format!("kernel level: {level:?},")
        } else {
            format!("kernel level: {level:?}, avx2 vpdpbusd: {form}")
        };
        assert!(stdout.contains(&want), "{name} ({form}) was not in force");
        assert!(
            stdout.contains("20/20 close to reference"),
            "{name}: {stdout}"
        );
    }
}
