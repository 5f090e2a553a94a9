//! Device profiles: the built-in ones carry NVIDIA's published figures, and a malformed
//! profile is refused with an error naming the field.

use constraints::device::{DeviceProfile, BUILT_IN};

#[test]
fn built_in_profiles_carry_the_published_limits() {
    let h200 = DeviceProfile::load("h200").unwrap();
    assert_eq!((h200.compute_capability.as_str(), h200.multiprocessors), ("9.0", 132));
    assert_eq!((h200.shared_memory_per_block, h200.shared_memory_per_block_optin), (48 * 1024, 227 * 1024));
    let m2050 = DeviceProfile::load("m2050").unwrap();
    assert_eq!((m2050.registers_per_thread, m2050.registers_per_block, m2050.warps_per_multiprocessor), (63, 32768, 48));
    let a100 = DeviceProfile::load("a100").unwrap();
    assert_eq!((a100.multiprocessors, a100.shared_memory_per_block_optin), (108, 163 * 1024));
    let l4 = DeviceProfile::load("l4").unwrap();
    assert_eq!((l4.compute_capability.as_str(), l4.warps_per_multiprocessor, l4.blocks_per_multiprocessor), ("8.9", 48, 24));
    let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["m2050", "v100", "a100", "l4", "h100", "h200"]);
}

fn h200_text() -> String {
    BUILT_IN.iter().find(|(n, _)| *n == "h200").unwrap().1.to_string()
}

fn error_of(text: &str) -> String {
    DeviceProfile::parse("my.yaml", text).expect_err("malformed profile accepted").to_string()
}

#[test]
fn malformed_profiles_name_the_field() {
    let missing = h200_text().replace("warp_size: 32\n", "");
    let e = error_of(&missing);
    assert!(e.contains("my.yaml") && e.contains("warp_size"), "{e}");

    let wrong_type = h200_text().replace("threads_per_block: 1024", "threads_per_block: lots");
    let e = error_of(&wrong_type);
    assert!(e.contains("threads_per_block"), "{e}");

    let unknown = format!("{}shared_memory_per_blok: 1\n", h200_text());
    let e = error_of(&unknown);
    assert!(e.contains("shared_memory_per_blok"), "{e}");

    let zero = h200_text().replace("multiprocessors: 132", "multiprocessors: 0");
    let e = error_of(&zero);
    assert!(e.contains("`multiprocessors`") && e.contains("positive"), "{e}");

    let optin_below_default = h200_text().replace("shared_memory_per_block_optin: 232448", "shared_memory_per_block_optin: 1024");
    let e = error_of(&optin_below_default);
    assert!(e.contains("`shared_memory_per_block_optin`"), "{e}");

    let bad_capability = h200_text().replace("compute_capability: \"9.0\"", "compute_capability: \"sm90\"");
    let e = error_of(&bad_capability);
    assert!(e.contains("`compute_capability`"), "{e}");
}

#[test]
fn profiles_load_by_path_and_unknown_names_list_the_built_ins() {
    let tmp = tempfile::Builder::new().prefix("metafork-device-").tempdir().unwrap();
    let dir = tmp.path();
    let path = dir.join("mine.yaml");
    std::fs::write(&path, h200_text().replace("name: h200", "name: my-h200")).unwrap();
    let p = DeviceProfile::load(path.to_str().unwrap()).unwrap();
    assert_eq!(p.name, "my-h200");
    let e = DeviceProfile::load("h300").unwrap_err().to_string();
    assert!(e.contains("h300") && e.contains("h200") && e.contains("m2050"), "{e}");
    let e = DeviceProfile::load(dir.join("absent.yaml").to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("absent.yaml"), "{e}");
    tmp.close().unwrap();
}
