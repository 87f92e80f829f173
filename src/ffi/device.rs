//! ggml device API (`ggml_backend_dev_*`) for hosts that drive placement from C.

/// A device (`struct ggml_backend_device`); internals private.
pub struct ggml_backend_device {
    _private: (),
}

/// A buffer type (`struct ggml_backend_buffer_type`); internals private.
pub struct ggml_backend_buffer_type {
    _private: (),
}

/// Whether any GPU device (CUDA or virtual) exists. No devices are registered until the
/// devices work lands, so this is false.
pub(crate) fn any_gpu() -> bool {
    false
}
