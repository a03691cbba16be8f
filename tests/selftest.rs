//! The main job (`cargo run --release`) on the CPU emulator: every case runs and
//! passes, and the table says that the shapes are reduced.

use mlxcel_amdgpu::{Device, selftest};

#[test]
fn selftest_passes_on_the_emulator_and_says_its_shapes_are_reduced() {
    let dev = Device::cpu();
    let outcomes = selftest::run(&dev);
    let table = selftest::render(&dev, &outcomes);
    println!("{table}");
    // The probe, then 5 kernels x 3 dtypes.
    assert_eq!(outcomes.len(), 16, "{table}");
    assert!(outcomes.iter().all(|o| o.passed && o.millis.is_some()), "{table}");
    assert!(table.contains("reduced shapes"), "{table}");
    assert!(table.contains("16 passed, 0 failed"), "{table}");
}
