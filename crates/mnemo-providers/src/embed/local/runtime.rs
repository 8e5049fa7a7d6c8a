//! Where the local model runs (`embedding.device`, `embedding.onnxruntime`): the ONNX Runtime
//! library loaded and the execution provider its sessions use.
//!
//! The CPU is the default and what every test runs. NVIDIA GPUs run the same graph through ONNX
//! Runtime's CUDA execution provider: a build with the `cuda` cargo feature
//! (`cargo build --release --features cuda`) and ONNX Runtime's GPU library
//! (`./scripts/setup-model --gpu`: PyPI's onnxruntime-gpu, CUDA 13 and cuDNN 9 from the system
//! or NVIDIA's PyPI packages). The vectors stay the model's — same graph, same prompts, same model
//! id — so a data directory moves between CPU and GPU without `mnemo reindex`. Untested where no
//! GPU is present (CI has none): there the CUDA provider's registration is tested to fail with a
//! message that says what is missing.

use std::path::{Path, PathBuf};

/// The ONNX Runtime library `scripts/setup-model` installs (CPU), in the model directory.
pub(super) const ORT_LIB: &str = "libonnxruntime.so.1.31.1";
/// Where `scripts/setup-model --gpu` puts the GPU build of the same version (with its CUDA
/// provider libraries beside it, where ONNX Runtime looks for them).
pub const GPU_DIR: &str = "gpu";

/// The device the inference sessions run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    #[default]
    Cpu,
    /// An NVIDIA GPU by its CUDA ordinal.
    Cuda(i32),
}

impl Device {
    /// `cpu`, `cuda` (GPU 0) or `cuda:N`. CUDA needs a build with the `cuda` feature.
    pub fn parse(s: &str) -> Result<Self, String> {
        let device = match s.trim() {
            "cpu" => Self::Cpu,
            "cuda" => Self::Cuda(0),
            other => match other.strip_prefix("cuda:").map(str::parse::<i32>) {
                Some(Ok(n)) if (0..=255).contains(&n) => Self::Cuda(n),
                _ => {
                    return Err(format!(
                        "embedding.device: must be cpu, cuda or cuda:N (N a GPU ordinal in 0..=255), got {other:?}"
                    ));
                }
            },
        };
        if matches!(device, Self::Cuda(_)) && !cfg!(feature = "cuda") {
            return Err(format!(
                "embedding.device: {s} needs mnemo built with the cuda feature (cargo build --release --features cuda) \
                 and ONNX Runtime's GPU library (./scripts/setup-model --gpu); this build runs on the CPU only"
            ));
        }
        Ok(device)
    }
}

/// The runtime a [`super::LocalEmbedder`] loads: the library and the device.
#[derive(Clone, Debug, Default)]
pub struct Runtime {
    pub device: Device,
    /// The ONNX Runtime shared library (`embedding.onnxruntime`); unset: the model directory's,
    /// or its `gpu/` one for CUDA.
    pub library: Option<PathBuf>,
    /// `embedding.fast_int8`: let a CPU without VNNI multiply the int8 weights by pairs summed in
    /// 16 bits, which saturate ([`on_device`]); off by default.
    pub fast_int8: bool,
}

impl Runtime {
    /// The library to load for a model in `dir`. One per process: ONNX Runtime is loaded once, so
    /// a second embedder in the same process runs on the first one's library.
    pub fn library_in(&self, dir: &Path) -> PathBuf {
        match (&self.library, self.device) {
            (Some(lib), _) => lib.clone(),
            (None, Device::Cpu) => dir.join(ORT_LIB),
            (None, Device::Cuda(_)) => dir.join(GPU_DIR).join(ORT_LIB),
        }
    }
}

/// Whether ONNX Runtime's fast int8 product saturates on this CPU: x86 without VNNI (neither
/// AVX512-VNNI nor AVX-VNNI), whose u8 × s8 products are summed in pairs into 16 bits.
pub fn int8_saturates() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !(std::arch::is_x86_feature_detected!("avx512vnni") || std::arch::is_x86_feature_detected!("avxvnni"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `session.x64quantprecision`: "1" (u8 × u8, exact and slower) only where the fast products
/// saturate and `embedding.fast_int8` does not take them anyway.
pub(super) fn quant_precision(fast_int8: bool, saturates: bool) -> &'static str {
    if saturates && !fast_int8 { "1" } else { "0" }
}

/// A session builder set to run on `device` (an error, not a silent fall back to the CPU, when
/// the library or the machine cannot).
///
/// On the CPU, the int8 products are exact unless `fast_int8`. An x86 CPU without VNNI (AVX2
/// alone: most AMD EPYC before Zen 4, Intel before Cascade Lake) multiplies u8 activations by s8
/// weights two at a time into a saturating 16-bit sum (`VPMADDUBSW`), and EmbeddingGemma's
/// weights use the whole s8 range, so its vectors drift from the model's: on such a CPU LoCoMo
/// dev's evidence present at 1,200 tokens read 0.837 instead of 0.865 (multi-hop 0.352 instead of
/// 0.458), zh-life's vector-only all@5 0.930 instead of 0.955. ONNX Runtime's
/// `session.x64quantprecision` stores those weights as u8 and multiplies u8 by u8 without
/// saturation there (~15 % slower on that CPU). It is asked for only there: a CPU with VNNI sums
/// the fast products in 32 bits, exact already, and the option would take it off VNNI — 2–3×
/// slower embedding for the same vectors (docs/benchmarks.md, "Exact int8 on CPUs without VNNI",
/// "… and at full speed with VNNI").
pub(super) fn on_device(
    builder: ort::session::builder::SessionBuilder,
    device: Device,
    fast_int8: bool,
) -> ort::Result<ort::session::builder::SessionBuilder> {
    let builder = builder
        .with_config_entry("session.x64quantprecision", quant_precision(fast_int8, int8_saturates()))
        .map_err(Into::<ort::Error>::into)?;
    match device {
        Device::Cpu => Ok(builder),
        #[cfg(feature = "cuda")]
        Device::Cuda(id) => builder
            .with_execution_providers([ort::ep::CUDA::default().with_device_id(id).build().error_on_failure()])
            .map_err(Into::into),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(ort::Error::new("this build has no CUDA support (the cuda cargo feature)")),
    }
}

/// What a failed CUDA start says besides ONNX Runtime's own error: what to install.
pub(super) fn cuda_hint(device: Device, library: &Path) -> String {
    match device {
        Device::Cpu => String::new(),
        Device::Cuda(_) => format!(
            " (embedding.device: cuda needs ONNX Runtime's GPU build — this loaded {}; ./scripts/setup-model --gpu \
             installs it in the model directory's gpu/, or name one with embedding.onnxruntime — with CUDA 13 and \
             cuDNN 9 on the library path and an NVIDIA driver; embedding.device: cpu runs without them)",
            library.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_name_the_key_when_they_do_not() {
        assert_eq!(Device::parse("cpu"), Ok(Device::Cpu));
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:256", ""] {
            let e = Device::parse(bad).unwrap_err();
            assert!(e.starts_with("embedding.device: must be cpu, cuda or cuda:N"), "{bad}: {e}");
        }
        if cfg!(feature = "cuda") {
            assert_eq!(Device::parse("cuda"), Ok(Device::Cuda(0)));
            assert_eq!(Device::parse("cuda:3"), Ok(Device::Cuda(3)));
        } else {
            let e = Device::parse("cuda:1").unwrap_err();
            assert!(e.contains("--features cuda") && e.contains("setup-model --gpu"), "{e}");
        }
    }

    #[test]
    fn the_library_follows_the_device_unless_named() {
        let dir = Path::new("/m");
        assert_eq!(Runtime::default().library_in(dir), dir.join(ORT_LIB));
        let gpu = Runtime { device: Device::Cuda(1), ..Runtime::default() };
        assert_eq!(gpu.library_in(dir), Path::new("/m/gpu").join(ORT_LIB));
        let own = Runtime {
            device: Device::Cuda(0),
            library: Some("/opt/ort/libonnxruntime.so".into()),
            ..Runtime::default()
        };
        assert_eq!(own.library_in(dir), Path::new("/opt/ort/libonnxruntime.so"));
    }
}
