//! Print which CPU-id source this process uses and the current CPU.
fn main() {
    let s = rstat::percpu::cpu::source();
    println!(
        "source={s} cpu={} possible={}",
        rstat::percpu::cpu::current(),
        rstat::percpu::cpu::possible_cpus()
    );
}
