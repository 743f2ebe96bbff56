//! Tells the kernel tests which instruction-set levels this machine's CPU has
//! (`cpu_avx2`, `cpu_avx512`, and `cpu_gfni` on an AVX-512 CPU with GFNI, with the features `Simd::detected` asks for;
//! `cpu_vnni256` and `cpu_avxvnni` for the AVX2 matmul's `vpdpbusd`, EVEX and VEX), so that the
//! test of a level the CPU lacks is reported as ignored, by name, and never as passed.
//! The tests run where they are built; each also checks the CPU agrees at run time.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(cpu_avx2)");
    println!("cargo::rustc-check-cfg=cfg(cpu_avx512)");
    println!("cargo::rustc-check-cfg=cfg(cpu_gfni)");
    println!("cargo::rustc-check-cfg=cfg(cpu_vnni256)");
    println!("cargo::rustc-check-cfg=cfg(cpu_avxvnni)");
    // Set by `scripts/fuzz`.
    println!("cargo::rustc-check-cfg=cfg(fuzzing)");
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        if avx2 {
            println!("cargo::rustc-cfg=cpu_avx2");
        }
        // The 256-bit `vpdpbusd` of the AVX2 matmul: EVEX, and VEX.
        if avx2 && has!("avx512vnni") && has!("avx512vl") {
            println!("cargo::rustc-cfg=cpu_vnni256");
        }
        if avx2 && has!("avxvnni") {
            println!("cargo::rustc-cfg=cpu_avxvnni");
        }
        if avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
            println!("cargo::rustc-cfg=cpu_avx512");
            if has!("gfni") {
                println!("cargo::rustc-cfg=cpu_gfni");
            }
        }
    }
}
