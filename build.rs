//! Tells the integration tests whether this machine's CPU has AVX-512 (F, BW, VNNI) with
//! GFNI (`cpu_gfni`), so that a test of the GFNI kernel path is reported as ignored, by
//! name, where the CPU lacks it, never as passed (as `crates/sluice-kernels/build.rs`
//! does for the kernel tests).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(cpu_gfni)");
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        let avx512 = has!("avx512f") && has!("avx512bw") && has!("avx512vnni");
        if avx512 && has!("avx2") && has!("fma") && has!("f16c") && has!("gfni") {
            println!("cargo::rustc-cfg=cpu_gfni");
        }
    }
}
