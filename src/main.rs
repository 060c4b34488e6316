//! The `braid` command line: serving, the model's own tools, and the benchmarks.

mod info;

use braid_model::engine_bench::EngineBenchOptions;
use braid_model::generate::{generate, GenerateOptions};
use braid_model::{LoadedModel, SamplingParams};
use braid_text::{ChatMessage, IncrementalDecoder};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "braid",
    version,
    about = "A CPU inference server that braids prompt reading into every decode step"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API (completions, chat, streaming) on HTTP.
    Serve(Box<braid_server::ServeArgs>),
    /// Print the token ids of TEXT as a JSON array.
    Tokenize {
        /// The text to tokenize.
        text: String,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Stream the continuation of a prompt to stdout.
    Generate {
        /// The text to continue (special tokens such as <|im_start|> are recognized).
        #[arg(long)]
        prompt: String,
        #[command(flatten)]
        gen: GenArgs,
    },
    /// Answer one chat message, using the model's chat template; stops at end of turn.
    Chat {
        /// The user's message.
        message: String,
        /// Optional system message (the template's default is used otherwise).
        #[arg(long)]
        system: Option<String>,
        /// A Jinja chat template file to use instead of the model's own; needed for a model
        /// whose GGUF has none (a base model such as Gemma 3 270M).
        #[arg(long, value_name = "FILE")]
        chat_template: Option<PathBuf>,
        #[command(flatten)]
        gen: GenArgs,
    },
    /// Load-test any OpenAI-compatible server (braid, llama.cpp's llama-server, vLLM).
    Bench(braid_bench::BenchArgs),
    /// The engine alone: prefill tokens/s for one prompt and decode tokens/s for N sequences.
    BenchEngine {
        #[command(flatten)]
        model: ModelArgs,
        /// Prompt lengths for the prefill measurement, one fresh prompt each.
        #[arg(long, value_delimiter = ',', default_values_t = EngineBenchOptions::default().prompt_tokens)]
        prompt_tokens: Vec<usize>,
        /// Sequences decoding together.
        #[arg(long, value_delimiter = ',', default_values_t = EngineBenchOptions::default().batch_sizes)]
        batch: Vec<usize>,
        /// Context each decoding sequence already holds.
        #[arg(long, default_value_t = EngineBenchOptions::default().context)]
        context: usize,
        /// Decode steps timed for each batch size; more steps give steadier figures on a busy
        /// machine, and a window long enough to profile.
        #[arg(long, default_value_t = EngineBenchOptions::default().decode_steps)]
        decode_steps: usize,
        /// Also time candle's matmul paths (Q4_1 as shipped, Q8_0, f32) against braid's int8
        /// kernel on the model's linear layers, at 1 to 256 rows.
        #[arg(long)]
        compare_kernels: bool,
        /// Compute with this kernel instead of the fastest this CPU has (overrides
        /// BRAID_KERNEL); refused if the CPU cannot run it. One run measures one kernel.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
            braid_kernels::Kernel::ALL.map(braid_kernels::Kernel::name)
        ))]
        kernel: Option<String>,
        /// How the KV cache stores keys and values, as `braid serve --kv-cache-dtype`.
        #[arg(long, value_enum, default_value_t = braid_server::args::KvCacheDtype::Auto)]
        kv_cache_dtype: braid_server::args::KvCacheDtype,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What braid computes with here: version, CPU and its vector features, every kernel and
    /// the one chosen, compute threads, and the model's shape.
    Info {
        #[command(flatten)]
        model: ModelArgs,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct ModelArgs {
    /// A GGUF model file (llama, qwen2, qwen3 or gemma3 architecture).
    #[arg(long, env = "BRAID_MODEL", default_value = braid_model::DEFAULT_MODEL_PATH)]
    model: PathBuf,
    /// Compute threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args)]
struct GenArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Seed for reproducible sampling (random when omitted).
    #[arg(long)]
    seed: Option<u64>,
    /// Sample only among the k most likely tokens (0: no limit).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample only among the most likely tokens whose probabilities add up to p.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
}

impl ModelArgs {
    /// `--threads`, or every core this process may use (as `braid serve` counts them).
    fn threads(&self) -> usize {
        self.threads
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    fn load(&self) -> anyhow::Result<LoadedModel> {
        self.load_with_chat_template(None)
    }

    fn load_with_chat_template(&self, chat_template: Option<&str>) -> anyhow::Result<LoadedModel> {
        braid_engine::compute_pool::init(self.threads());
        Ok(LoadedModel::load_with_chat_template(
            &self.model,
            chat_template,
        )?)
    }
}

fn stream(m: &LoadedModel, prompt: &[u32], gen: &GenArgs) -> anyhow::Result<()> {
    let opts = GenerateOptions {
        max_tokens: gen.max_tokens,
        params: SamplingParams {
            temperature: gen.temperature,
            seed: gen.seed,
            top_k: gen.top_k,
            top_p: gen.top_p,
            ..Default::default()
        },
        prefill_chunk: 0,
        stop_at_eos: true,
    };
    let mut dec = IncrementalDecoder::default();
    let mut out = std::io::stdout().lock();
    let mut io_error = None;
    generate(m, prompt, &opts, |id| {
        let piece = dec.push(&m.tokenizer, id, true);
        match out.write_all(piece.as_bytes()).and_then(|_| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                io_error = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = io_error {
        return Err(e.into());
    }
    writeln!(out, "{}", dec.finish())?;
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("braid: {e:#}");
        std::process::exit(1);
    }
}

/// Whether log lines get ANSI colours: only on a terminal, since in a file or a log collector
/// they are noise, and never with a non-empty NO_COLOR (https://no-color.org).
fn colour_logs(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_logs(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .init();
    let cli = Cli::parse();
    // The load-test client computes nothing; everything else refuses a kernel the CPU lacks
    // before it loads a model. bench-engine's --kernel wins over BRAID_KERNEL.
    match &cli.command {
        Command::Bench(_) => {}
        Command::BenchEngine {
            kernel: Some(name), ..
        } => {
            braid_kernels::select(Some(name))?;
        }
        _ => {
            braid_kernels::select_from_env()?;
        }
    }
    match cli.command {
        Command::Tokenize { text, model } => {
            let m = model.load()?;
            println!("{}", serde_json::to_string(&m.tokenizer.encode(&text)?)?);
        }
        Command::Generate { prompt, gen } => {
            let m = gen.model.load()?;
            let ids = m.tokenizer.encode_prompt(&prompt)?;
            stream(&m, &ids, &gen)?;
        }
        Command::Chat {
            message,
            system,
            chat_template,
            gen,
        } => {
            let chat_template = chat_template
                .as_deref()
                .map(braid_server::args::read_chat_template)
                .transpose()?;
            let m = gen
                .model
                .load_with_chat_template(chat_template.as_deref())?;
            let Some(template) = &m.chat_template else {
                anyhow::bail!(
                    "{} has no chat template (a base model); pass --chat-template FILE to supply one, or continue a prompt with `braid generate --prompt TEXT`",
                    gen.model.model.display()
                );
            };
            let mut messages = Vec::new();
            if let Some(system) = system {
                messages.push(ChatMessage {
                    role: "system".into(),
                    content: system,
                    ..ChatMessage::default()
                });
            }
            messages.push(ChatMessage {
                role: "user".into(),
                content: message,
                ..ChatMessage::default()
            });
            let ids = m.tokenizer.encode_prompt(&template.render(
                &messages,
                None,
                true,
                &Default::default(),
            )?)?;
            stream(&m, &ids, &gen)?;
        }
        // The server sets up the compute pool itself (`braid_server::start`).
        Command::Serve(args) => {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(braid_server::serve(*args))?;
        }
        Command::Bench(args) => {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?
                .block_on(braid_bench::run(args))?;
        }
        Command::BenchEngine {
            model,
            prompt_tokens,
            batch,
            context,
            decode_steps,
            compare_kernels,
            kernel: _,
            kv_cache_dtype,
            json,
        } => {
            let m = model.load()?;
            let opts = EngineBenchOptions {
                prompt_tokens,
                batch_sizes: batch,
                context,
                decode_steps,
                kv_dtype: kv_cache_dtype.into(),
                ..Default::default()
            };
            let report = braid_model::engine_bench::run(&m, &opts)?;
            let kernels = if compare_kernels {
                braid_model::kernel_comparison::run(
                    &model.model,
                    m.config().num_layers,
                    &[1, 4, 16, 64, 256],
                )?
            } else {
                Vec::new()
            };
            if json {
                let mut value = serde_json::to_value(&report)?;
                value["kernels"] = serde_json::to_value(&kernels)?;
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!("{report}");
                if !kernels.is_empty() {
                    println!("\nlinear layers of one forward, tokens/s:");
                    println!(
                        "{:>5} {:>17} {:>12} {:>11} {:>11}",
                        "rows", "candle as shipped", "candle Q8_0", "candle f32", "braid int8"
                    );
                    for r in kernels {
                        println!(
                            "{:>5} {:>17.0} {:>12.0} {:>11.0} {:>11.0}",
                            r.rows, r.candle_as_shipped, r.candle_q8_0, r.candle_f32, r.braid_int8
                        );
                    }
                }
            }
        }
        Command::Info { model, json } => {
            let threads = braid_engine::compute_pool::init(model.threads());
            let report = info::collect(&model.model, threads);
            let text = if json {
                serde_json::to_string_pretty(&report)? + "\n"
            } else {
                info::render(&report)
            };
            // An error, not a panic, when the reader went away (`braid info | head`).
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::colour_logs;
    use std::ffi::OsStr;

    #[test]
    fn logs_are_coloured_only_on_a_terminal() {
        assert!(colour_logs(true, None));
        assert!(!colour_logs(false, None));
    }

    #[test]
    fn a_non_empty_no_color_turns_colour_off() {
        assert!(!colour_logs(true, Some(OsStr::new("1"))));
        assert!(colour_logs(true, Some(OsStr::new(""))));
    }
}
