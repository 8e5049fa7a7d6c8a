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

/// A session builder set to run on `device` (an error, not a silent fall back to the CPU, when
/// the library or the machine cannot).
pub(super) fn on_device(
    builder: ort::session::builder::SessionBuilder,
    device: Device,
) -> ort::Result<ort::session::builder::SessionBuilder> {
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
        let gpu = Runtime { device: Device::Cuda(1), library: None };
        assert_eq!(gpu.library_in(dir), Path::new("/m/gpu").join(ORT_LIB));
        let own = Runtime { device: Device::Cuda(0), library: Some("/opt/ort/libonnxruntime.so".into()) };
        assert_eq!(own.library_in(dir), Path::new("/opt/ort/libonnxruntime.so"));
    }
}
