pub mod hlo_sample;
