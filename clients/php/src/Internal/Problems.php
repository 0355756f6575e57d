<?php

declare(strict_types=1);

namespace Baton\Internal;

use Baton\Exception\BatonException;
use Baton\Exception\ForbiddenException;
use Baton\Exception\IdempotencyException;
use Baton\Exception\InvalidRequestException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\LimitMismatchException;
use Baton\Exception\LockHeldException;
use Baton\Exception\OverloadedException;
use Baton\Exception\RateLimitedException;
use Baton\Exception\SessionNotFoundException;
use Baton\Exception\TicketGoneException;
use Baton\Exception\UnauthorizedException;
use Baton\Exception\UnavailableException;

/**
 * Problems turns an error answer into the typed exception for its problem kind.
 *
 * @internal
 */
final class Problems
{
    /** @var array<string, class-string<BatonException>> */
    private const BY_KIND = [
        'lock-held' => LockHeldException::class,
        'lease-not-held' => LeaseLostException::class,
        'session-not-found' => SessionNotFoundException::class,
        'ticket-gone' => TicketGoneException::class,
        'unauthorized' => UnauthorizedException::class,
        'forbidden' => ForbiddenException::class,
        'limit-mismatch' => LimitMismatchException::class,
        'idempotency-key-used' => IdempotencyException::class,
        'idempotency-key-mismatch' => IdempotencyException::class,
        'invalid-request' => InvalidRequestException::class,
        'invalid-name' => InvalidRequestException::class,
        'body-too-large' => InvalidRequestException::class,
        'unsupported-media-type' => InvalidRequestException::class,
        'request-timeout' => InvalidRequestException::class,
        'not-found' => InvalidRequestException::class,
        'method-not-allowed' => InvalidRequestException::class,
        'rate-limited' => RateLimitedException::class,
        'too-many-waiters' => RateLimitedException::class,
        'store-unavailable' => UnavailableException::class,
        'overloaded' => OverloadedException::class,
    ];

    /** @var array<int, class-string<BatonException>> for answers without a problem body (proxies) */
    private const BY_STATUS = [
        401 => UnauthorizedException::class,
        403 => ForbiddenException::class,
        429 => RateLimitedException::class,
        502 => UnavailableException::class,
        503 => UnavailableException::class,
        504 => UnavailableException::class,
    ];

    /**
     * The exception for the error answer $r to the call $op (such as
     * `acquire "reports"`) about the lock $lock.
     */
    public static function exception(Response $r, string $op, ?string $lock): BatonException
    {
        $p = $r->json ?? [];
        $type = is_string($p['type'] ?? null) ? $p['type'] : '';
        $slash = strrpos($type, '/');
        $kind = $slash === false ? $type : substr($type, $slash + 1);
        $class = self::BY_KIND[$kind] ?? self::BY_STATUS[$r->status] ?? BatonException::class;
        if ($type === '') {
            $p = [];
            $detail = sprintf('HTTP %d without a problem document (from a proxy in front of Baton?)', $r->status);
        } else {
            $detail = is_string($p['detail'] ?? null) ? $p['detail'] : '';
        }
        $owner = is_string($p['owner'] ?? null) ? $p['owner'] : null;
        $ttl = Duration::seconds($p['ttl_ms'] ?? null);
        $retryAfter = $r->retryAfter();

        $message = sprintf('%s: %d %s: %s', $op, $r->status, $kind !== '' ? $kind : 'error', $detail);
        if ($kind === 'lock-held') {
            $by = $owner !== null && $owner !== ''
                ? ' by ' . json_encode($owner, JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES)
                : '';
            $message .= sprintf(
                ' (held%s, %.3f s left%s)',
                $by,
                $ttl ?? 0.0,
                is_int($p['waiters'] ?? null) && $p['waiters'] > 0 ? sprintf(', %d queued', $p['waiters']) : ''
            );
        }
        if ($retryAfter !== null) {
            $message .= sprintf('; retry after %g s', $retryAfter);
        }

        return new $class($message, $type, $r->status, $detail, $retryAfter, $owner, $ttl, $lock, $p);
    }
}
