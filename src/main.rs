//! The `wgpu-hlo` command line.

fn main() {
    eprintln!("wgpu-hlo: no commands yet");
    std::process::exit(2);
}
