//! GGUF reading and writing over byte slices (see the GGUF issue). Placeholder until it lands.
