<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * BatonException is an error answer from Baton (an RFC 9457 problem), or no
 * answer at all (ConnectionException). Its subclasses name the kinds a program
 * handles; this class itself stands for the rest (`/problems/internal`).
 *
 * It never carries the API key: neither in its message nor in any property.
 */
class BatonException extends \RuntimeException implements ExceptionInterface
{
    /** The problem type, such as `/problems/lock-held`; empty when nothing answered. */
    public readonly string $type;

    /** The HTTP status; 0 when nothing answered. */
    public readonly int $status;

    /** The problem's detail, for humans. */
    public readonly string $detail;

    /** Seconds to wait before trying again (`Retry-After`), when the answer said. */
    public readonly ?float $retryAfter;

    /** The holder's owner label, on `lock-held`. */
    public readonly ?string $owner;

    /** The holder's remaining time in seconds, on `lock-held`. */
    public readonly ?float $ttl;

    /** The lock the failed call was about, when it was about one. */
    public readonly ?string $lock;

    /** @var array<string, mixed> The problem document as Baton sent it. */
    public readonly array $problem;

    /**
     * @param array<string, mixed> $problem
     */
    public function __construct(
        string $message,
        string $type = '',
        int $status = 0,
        string $detail = '',
        ?float $retryAfter = null,
        ?string $owner = null,
        ?float $ttl = null,
        ?string $lock = null,
        array $problem = [],
        ?\Throwable $previous = null
    ) {
        parent::__construct($message, $status, $previous);
        $this->type = $type;
        $this->status = $status;
        $this->detail = $detail;
        $this->retryAfter = $retryAfter;
        $this->owner = $owner;
        $this->ttl = $ttl;
        $this->lock = $lock;
        $this->problem = $problem;
    }

    /**
     * The problem kind: the last segment of `type`, such as `lock-held`; empty
     * when nothing answered.
     */
    public function kind(): string
    {
        $slash = strrpos($this->type, '/');

        return $slash === false ? $this->type : substr($this->type, $slash + 1);
    }
}
