<?php

declare(strict_types=1);

namespace Baton\Internal;

/**
 * Response is one HTTP answer from Baton (or a proxy in front of it).
 *
 * @internal
 */
final class Response
{
    /**
     * @param array<string, string>     $headers lower-cased names
     * @param array<string, mixed>|null $json    the body, when it is a JSON object
     * @param int                       $attempts how many times the request was sent
     */
    public function __construct(
        public readonly int $status,
        public readonly array $headers,
        public readonly ?array $json,
        public readonly int $attempts
    ) {
    }

    public function header(string $name): ?string
    {
        return $this->headers[strtolower($name)] ?? null;
    }

    /**
     * The Retry-After header in seconds, when it is a number.
     */
    public function retryAfter(): ?float
    {
        $v = $this->header('retry-after');

        return $v !== null && is_numeric(trim($v)) ? (float) trim($v) : null;
    }

    /**
     * The body's field $name, as an array (the whole body when null).
     *
     * @return array<string, mixed>
     */
    public function body(): array
    {
        return $this->json ?? [];
    }
}
