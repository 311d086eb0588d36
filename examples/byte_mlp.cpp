// A model of one's own: an MLP on bytes (each byte predicts the next through one hidden ReLU layer),
// declared in one visit walk and trained by the same trainer as the GPT: AdamW, clipping, log.csv,
// atomic checkpoints, --resume. Before training, the tape's gradients are checked against central
// differences in float64. See docs/tutorial.md, "Your own model".
//
//   build/bin/byte_mlp --data build/fortunes.txt --out build/byte-mlp --steps 500
#include <cmath>
#include <cstdio>

#include "autodiff/gradcheck.hpp"
#include "examples/command_line.hpp"
#include "io/checkpoint.hpp"
#include "train/trainer.hpp"

using namespace xgrad;

template <class T>
struct byte_mlp
{
    std::size_t vocab = 0, width = 32, hidden = 128;
    parameter<T> embed, W_in, b_in, W_out, b_out;

    // Every parameter once: name, handle, shape and initialiser.
    template <class F>
    void visit(F&& f)
    {
        f("embed", embed, models::declare::normal({vocab, width}, 0.5));
        f("W_in", W_in, models::declare::normal({width, hidden}, 1 / std::sqrt(double(width))));
        f("b_in", b_in, models::declare::zeros({hidden}));
        f("W_out", W_out, models::declare::normal({hidden, vocab}, 1 / std::sqrt(double(hidden))));
        f("b_out", b_out, models::declare::zeros({vocab}));
    }

    struct output
    {
        var<T> logits, loss;
    };

    // logits = relu(embed[tokens] W_in + b_in) W_out + b_out; the loss as the GPT's.
    output forward(tape<T>& t, const ids_t& tokens, const ids_t* targets, const models::forward_options& o) const
    {
        var<T> h = ops::relu(ops::matmul(ops::embedding(t.param(embed), tokens), t.param(W_in)) + t.param(b_in));
        if (o.generator && o.dropout > 0)
        {
            h = ops::dropout(h, static_cast<T>(o.dropout), *o.generator);
        }
        output r{ops::matmul(h, t.param(W_out)) + t.param(b_out), {}};
        if (targets)
        {
            r.loss = ops::cross_entropy(r.logits, *targets);
        }
        return r;
    }

    // What the checkpoint records about the architecture; a resumed run must agree with it.
    std::map<std::string, std::string> metadata() const
    {
        return {{"model", "byte_mlp"}, {"vocab_size", std::to_string(vocab)},
                {"width", std::to_string(width)}, {"hidden", std::to_string(hidden)}};
    }
    void save(const std::string& path, const io::checkpoint_extras& e) const
    {
        io::save_module(path, *this, metadata(), e);
    }
    io::checkpoint_extras resume_from(const std::string& path) { return io::load_module(path, *this, metadata()); }
};

// The tape's gradient of every parameter against central differences, in float64; the worst error.
double check_gradients(std::size_t vocab, std::uint64_t seed)
{
    byte_mlp<double> m;
    m.vocab = vocab, m.width = 4, m.hidden = 6;
    models::initialise(m, seed);
    ids_t tokens = xt::zeros<std::int64_t>({2, 3}), targets = xt::zeros<std::int64_t>({2, 3});
    for (std::size_t i = 0; i < tokens.size(); ++i)
    {
        tokens.flat(i) = static_cast<std::int64_t>((3 * i + 1) % vocab);
        targets.flat(i) = static_cast<std::int64_t>((5 * i + 2) % vocab);
    }
    auto loss = [&] {
        tape<double> t;
        return m.forward(t, tokens, &targets, {}).loss.item();
    };
    tape<double> t;
    t.backward(m.forward(t, tokens, &targets, {}).loss);
    double worst = 0;
    for (parameter<double>& p : models::named_parameters<double>(m))
    {
        worst = std::max(worst, xt::amax(xt::abs(numeric_gradient(loss, p.value()) - p.grad()))());
    }
    return worst;
}

int main(int argc, char** argv)
{
    train::train_options o;
    o.steps = 500;
    o.model.block_size = 32;
    std::size_t width = 32, hidden = 128;
    examples::command_line cli{"Train an MLP on bytes with xgrad's trainer", "byte_mlp"};
    cli.add_option("--data", o.data, "text file").required();
    cli.add_option("--out", o.out, "folder for model.safetensors and log.csv").required();
    cli.add_option("--steps", o.steps, "train up to this step");
    cli.add_option("--width", width, "embedding width");
    cli.add_option("--hidden", hidden, "hidden ReLU units");
    cli.add_option("--seed", o.seed, "seeds the weights and the batches");
    cli.add_flag("--resume", o.resume, "continue from --out/model.safetensors");
    if (const auto status = cli.parse(argc, argv))
    {
        return *status;
    }
    try
    {
        const train::text_corpus data = train::text_corpus::load(o.data, o.model.block_size);
        std::printf("gradcheck (float64): worst |tape - central differences| = %.2e\n",
                    check_gradients(data.vocabulary.size(), o.seed));
        byte_mlp<float> model;
        model.vocab = data.vocabulary.size(), model.width = width, model.hidden = hidden;
        models::initialise(model, o.seed);
        const train::train_summary s = train::train_module(model, data, o, stdout);
        std::printf("step %lld: train loss %.4f, validation loss %.4f, %llu parameters\n",
                    static_cast<long long>(s.last_step), s.train_loss, s.val_loss,
                    static_cast<unsigned long long>(s.parameters));
        return 0;
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "byte_mlp: %s\n", e.what());
        return 2;
    }
}
