"""The ``train`` section: the policy, SFT, and the two GRPO recipes (outcome GRPO, DA-GRPO)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestra.config.common import Seed, _Section


class PolicyInit(_Section):
    base_model: str | None = Field(
        None, description="a local Hugging Face causal-LM directory to start from; null = a new Qwen3"
    )
    vocab_size: int = Field(1000, ge=300, le=262144, description="BPE vocabulary of a from-scratch policy")
    hidden_size: int = Field(128, ge=16, le=8192)
    intermediate_size: int | None = Field(None, ge=16, le=65536, description="MLP width; null = 3 x hidden")
    layers: int = Field(2, ge=1, le=64)
    heads: int = Field(4, ge=1, le=64)
    max_length: int = Field(1024, ge=64, le=131072)


class SFTParams(_Section):
    epochs: float = Field(2.0, gt=0, le=100)
    learning_rate: float = Field(2e-3, gt=0, le=1)
    batch_size: int = Field(16, ge=1, le=1024)
    max_steps: int = Field(-1, ge=-1, description="-1: as many as the epochs take")
    warmup_steps: int = Field(20, ge=0)
    save_steps: int = Field(100, ge=1, description="a checkpoint every N steps (a killed run resumes there)")
    first_decision_repeats: int = Field(
        1,
        ge=1,
        le=100,
        description="each first decision (the whole plan, the hardest to get right) appears this many "
        "times per epoch",
    )
    replan_repeats: int = Field(
        1,
        ge=1,
        le=100,
        description="each later delegation of the expert (a re-plan after an unsure or failed result: "
        "some 2% of the states) appears this many times per epoch",
    )
    init: str | None = Field(
        None,
        description="continue from a policy instead of a new one: 'sft' (policy_sft/model), 'sft@N' (its "
        "snapshot at step N) or a policy directory; null = a new policy (train.policy)",
    )
    snapshot_steps: list[int] = Field(
        default_factory=list,
        description="keep the model at these steps as policy_sft/snapshots/step-N (an init that still errs)",
    )
    states: Literal["expert", "both"] = Field(
        "expert", description="both: also the start policy's own states, relabelled by the expert (DAgger)"
    )
    state_tasks: int = Field(64, ge=1, description="train tasks the start policy is rolled out on (states)")
    max_wall_s: float | None = Field(
        None, gt=0, description="stop training once this many seconds have passed (equal-budget comparisons)"
    )

    @model_validator(mode="after")
    def _states_need_a_policy(self) -> SFTParams:
        if self.states == "both" and self.init is None:
            raise ValueError(
                "train.sft.states: both needs train.sft.init (the policy whose states are relabelled)"
            )
        return self


class GRPOParams(_Section):
    learning_rate: float = Field(2e-5, gt=0, le=1)
    lr_scheduler: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="decay of the learning rate after the warm-up (TRL's lr_scheduler_type)"
    )
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description="share of max_steps the rate warms up over")
    num_generations: int = Field(8, ge=2, le=64, description="group size: decisions sampled per prompt")
    steps_per_generation: int = Field(
        1, ge=1, le=64, description="optimizer steps per generation batch: > 1 makes the clip act"
    )
    num_iterations: int = Field(
        1,
        ge=1,
        le=16,
        description="optimizer passes over each generation batch (GRPO's mu): > 1 makes the clip act",
    )
    per_device_batch_size: int = Field(
        32, ge=1, le=1024, description="completions per optimizer step: prompts per step x num_generations"
    )
    beta: float = Field(0.01, gt=0, le=10, description="KL weight to the reference (the SFT policy)")
    epsilon: float = Field(0.2, gt=0, le=1, description="PPO-style clip range")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "grpo"
    max_steps: int = Field(20, ge=1)
    max_completion_length: int = Field(256, ge=8, le=32768)
    temperature: float = Field(1.0, gt=0, le=5)
    save_steps: int = Field(5, ge=1, description="a checkpoint every N steps (a killed run resumes there)")
    init: str = Field(
        "sft", description="the policy to start from: 'sft', 'sft@N' (a snapshot) or a directory"
    )
    max_wall_s: float | None = Field(
        None, gt=0, description="stop training once this many seconds have passed (equal-budget comparisons)"
    )
    use_vllm: bool = Field(False, description="generate with vLLM (GPU, the `gpu` extra)")
    vllm_mode: Literal["server", "colocate"] = Field(
        "colocate", description="server: a `trl vllm-serve` process; colocate: in the trainer's GPUs"
    )
    vllm_server_url: str | None = Field(
        None, description="server mode: the `trl vllm-serve` base URL (default http://localhost:8000)"
    )

    @model_validator(mode="after")
    def _divides(self) -> GRPOParams:
        if (self.per_device_batch_size * self.steps_per_generation) % self.num_generations:
            raise ValueError(
                "per_device_batch_size * steps_per_generation must be a multiple of num_generations"
            )
        if self.save_steps % (self.steps_per_generation * self.num_iterations):
            raise ValueError(
                "save_steps must be a multiple of steps_per_generation * num_iterations "
                "(an exact resume point)"
            )
        return self


class OutcomeGRPOParams(GRPOParams):
    format_weight: float = Field(0.5, ge=0, description="weight of the format reward (answer: 1)")
    decisions: int = Field(
        2,
        ge=1,
        le=16,
        description="decisions of each rollout trained on (each on the tokens it was sampled from, with "
        "the rollout's reward); later ones are not",
    )

    @model_validator(mode="after")
    def _groups(self) -> OutcomeGRPOParams:
        groups = self.per_device_batch_size * self.steps_per_generation // self.num_generations
        if groups % self.decisions:
            raise ValueError(
                "per_device_batch_size * steps_per_generation / num_generations must be a multiple of "
                "decisions (a task's rollouts and every decision of them in one generation batch)"
            )
        return self


class RubricWeights(_Section):
    format: float = Field(1.0, ge=0)
    validity: float = Field(1.0, ge=0)
    tools: float = Field(1.0, ge=0)
    decision: float = Field(2.0, ge=0)


class DAGRPOParams(GRPOParams):
    reward: Literal["rubric", "progress", "lookahead"] = Field(
        "rubric",
        description="rubric: Orchestra-o1's four parts against the expert's decision (reward_provider "
        "scores them); progress: pending steps of the reference solution the decision completes "
        "(training/progress.py); lookahead: the decision run and the task finished by the expert, "
        "right answer less turns and calls (training/lookahead.py)",
    )
    resample_rounds: int = Field(
        0,
        ge=0,
        le=8,
        description="DAPO's dynamic sampling: groups whose rewards all tie are dropped and replaced by "
        "fresh prompts, up to this many rounds per generation batch (training/dynamic.py); 0 = off",
    )
    guide: bool = Field(
        False,
        description="a group whose decisions all tie below the expert's is scored again with the expert's "
        "decision in place of one sample and kept when that gives it spread (off-policy guidance, "
        "training/dynamic.py)",
    )
    reward_provider: str = "builtin"
    rubric: RubricWeights = RubricWeights()
    answer_credit: bool = Field(
        False,
        description="a finish whose answer equals the task's labelled answer scores full tools and decision "
        "credit even where the expert would go on (Orchestra-o1's judge sees the answer)",
    )
    states: Literal["expert", "policy", "both"] = Field(
        "expert",
        description="expert: the expert's path and off-path states; policy: the states the start policy "
        "reaches on train tasks, relabelled by the expert; both",
    )
    state_tasks: int = Field(64, ge=1, description="train tasks the start policy is rolled out on (states)")
    first_decision_repeats: int = Field(
        1,
        ge=1,
        le=100,
        description="a first decision (the plan) is drawn this many times as often as another",
    )
    screen: int = Field(
        0,
        ge=0,
        le=64,
        description="draw this many candidate states per prompt trained on and keep those where the "
        "start policy's greedy decision scores below the rubric's best (DAPO's dynamic sampling, done "
        "once before training: a group whose decisions all score alike has no advantage); 0 = off",
    )


class TrainParams(_Section):
    seed: Seed = 17
    policy: PolicyInit = PolicyInit()
    sft: SFTParams = SFTParams()
    grpo: OutcomeGRPOParams = OutcomeGRPOParams()
    dagrpo: DAGRPOParams = DAGRPOParams()
