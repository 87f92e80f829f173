//! The C boundary. Placeholder.
