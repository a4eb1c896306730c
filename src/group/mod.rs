//! Consumer groups: see the module files.
