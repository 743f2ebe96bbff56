//! The engine's errors: loading a model ([`ModelError`]), tokenising
//! ([`TokenizerError`]), submitting a request ([`SubmitError`]) and ending one early
//! ([`EngineError`]). A leaf: every other module may import it.

use std::path::PathBuf;

/// Why a model file cannot be opened or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file cannot be opened (missing, unreadable).
    #[error("cannot open model file {path}: {reason}")]
    Open {
        /// The path.
        path: PathBuf,
        /// The OS error.
        reason: std::io::Error,
    },
    /// The file is not GGUF, or its header is damaged.
    #[error("{path} is not a readable GGUF file: {reason}")]
    NotGguf {
        /// The path.
        path: PathBuf,
        /// What the reader found.
        reason: String,
    },
    /// `general.architecture` names a family sluice does not implement.
    #[error(
        "unsupported model architecture `{found}` (general.architecture); sluice runs: {}",
        supported.join(", ")
    )]
    Architecture {
        /// What the file says.
        found: String,
        /// What sluice runs.
        supported: Vec<&'static str>,
    },
    /// A tensor's data cannot be used (type without kernel, bad size).
    #[error("tensor `{name}`: {source}")]
    Tensor {
        /// The tensor.
        name: String,
        /// Why.
        source: sluice_kernels::LinearError,
    },
    /// A metadata key is missing or of the wrong type.
    #[error("metadata key `{0}` is missing or has the wrong type")]
    Metadata(String),
    /// A tensor the architecture needs is missing.
    #[error("tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// Its shape.
        found: Vec<usize>,
        /// The shape the hyper-parameters imply.
        expected: Vec<usize>,
    },
    /// Something the file declares that sluice does not implement (a RoPE scaling kind,
    /// an option of the family).
    #[error("{0}")]
    Unsupported(String),
    /// The vocabulary, tokenizer or chat template cannot be built.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

/// Why text cannot be turned into tokens or back, or a conversation into a prompt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerError {
    /// A `tokenizer.json` that cannot be loaded.
    #[error("tokenizer file {path}: {reason}")]
    File {
        /// The path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The GGUF vocabulary cannot be turned into a tokenizer.
    #[error("the GGUF vocabulary: {0}")]
    Vocab(String),
    /// Text that cannot be encoded.
    #[error("the text cannot be tokenised: {0}")]
    Encode(String),
    /// Ids that cannot be decoded.
    #[error("the token ids cannot be decoded: {0}")]
    Decode(String),
    /// The model has no chat template.
    #[error(
        "this model has no chat template (tokenizer.chat_template); use the completions API \
         with a raw prompt"
    )]
    NoChatTemplate,
    /// The model's chat template does not compile.
    #[error("the chat template does not parse: {0}")]
    TemplateSyntax(String),
    /// The chat template refused the conversation (`raise_exception`) or failed on it.
    #[error("the chat template cannot render these messages: {0}")]
    Template(String),
}

/// Why a submission was refused. Only what the engine alone can know: the client's
/// fields were checked by validation before.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full: retry later.
    #[error("the server is at capacity ({0} requests waiting); retry later")]
    QueueFull(usize),
    /// The queue holds its budget of prompt tokens: retry later.
    #[error("the server is at capacity ({0} prompt tokens waiting); retry later")]
    QueuedTokens(usize),
    /// prompt + max_tokens does not fit a slot (validation checks this first; the engine
    /// refuses it again so that no caller can overrun the slab).
    #[error(
        "this request needs {prompt} prompt tokens + {max_tokens} max_tokens = {} tokens, \
         more than the context of {context} tokens",
        prompt + max_tokens
    )]
    TooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Requested new tokens.
        max_tokens: usize,
        /// The engine's context.
        context: usize,
    },
    /// The prompt has no tokens, or `max_tokens` is 0 without prompt log-probabilities.
    #[error("the request has an empty prompt or asks for no tokens")]
    Empty,
    /// The engine thread is gone.
    #[error("the engine is not running")]
    EngineDown,
}

impl SubmitError {
    /// Label for `sluice_requests_rejected_total{reason}`.
    pub fn reason(&self) -> &'static str {
        match self {
            SubmitError::QueueFull(_) => "queue_full",
            SubmitError::QueuedTokens(_) => "queued_tokens",
            SubmitError::TooLong { .. } => "context_length",
            SubmitError::Empty => "empty",
            SubmitError::EngineDown => "engine_down",
        }
    }
}

/// Why the engine ended a request early. Each kind maps to its own API status.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// The request ran past the server's timeout (seconds).
    #[error("the request did not finish within the server's {0} s timeout")]
    TimedOut(f64),
    /// `POST /admin/reload` with `mode: abort` ended it.
    #[error("generation aborted: the server's weights were reloaded")]
    Aborted,
    /// The server is shutting down and its grace period ran out.
    #[error("the server is shutting down and its grace period ran out")]
    ShuttingDown,
    /// The request's grammar failed mid-generation (this sequence only).
    #[error("the output grammar failed: {0}")]
    Grammar(String),
    /// The engine thread failed; the server cannot generate until restarted.
    #[error("the engine failed and stopped; the server must be restarted")]
    Died,
}
