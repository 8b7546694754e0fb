fn main() {
    std::process::exit(chunkscope::cli::run());
}
