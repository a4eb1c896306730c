//! Producers: see the module files.
