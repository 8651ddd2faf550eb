"""Stand-in (see tests/ray_standins/README.md): OpenAI protocol models, never instantiated here."""

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


ChatCompletionRequest = ChatCompletionResponse = ChatCompletionStreamResponse = _Model
CompletionRequest = CompletionResponse = CompletionStreamResponse = _Model
DetokenizeRequest = DetokenizeResponse = TokenizeRequest = TokenizeResponse = _Model
EmbeddingRequest = EmbeddingResponse = ScoringRequest = ScoringResponse = _Model
