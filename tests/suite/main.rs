//! The integration tests, in one binary: one link of the library instead of one per file, and
//! the test threads kept busy by every test rather than a file's longest. Each module is the
//! tests of one concern (a file of its own, as before); `common` holds their helpers.
//!
//! The long suite (`cargo test --all-targets -- --ignored`, which CI runs too) has the heavy
//! end-to-end cases: every strategy where the default suite mounts the ones its assertions are
//! about, the whole demo, determinism across thread counts.

mod common;

mod analysis;
mod architecture;
mod calibrate;
mod conformance;
mod data_loss_hunt;
mod demo;
mod direct_io;
mod docs;
mod errors;
mod format_props;
mod gc;
mod gc_props;
mod gc_safety;
mod gen_check;
mod hostile;
mod hostile_layout;
mod live;
mod machine_output;
mod model_faults;
mod mount_scripts;
mod overlay;
mod passthrough;
mod phases;
mod requirements;
mod s3;
mod simulate;
mod survey;
mod syscalls;
mod testbed;
mod trace_format;
