<?php

declare(strict_types=1);

namespace Baton;

use Baton\Exception\BatonException;
use Baton\Exception\ExceptionInterface;
use Baton\Exception\InvalidArgumentException;
use Baton\Exception\LockHeldException;
use Baton\Exception\TicketGoneException;
use Baton\Internal\Duration;
use Baton\Internal\Problems;
use Baton\Internal\Transport;

/**
 * Ticket is a place in a lock's fair (FIFO) queue. It stays queued only while
 * it is polled: at most ticketTtl() seconds may pass between the end of one
 * poll and the next, from this process or a later one (Client::ticket() takes
 * the URL back). cancel() leaves the queue at once.
 *
 * Client::acquire(fair: true) polls and cancels for you; a Ticket of your own
 * comes from Client::enqueue(), for a PHP request that must not block.
 */
final class Ticket
{
    /** The lock's name. */
    public readonly string $name;

    /** The ticket URL (`/v1/locks/{name}/tickets/{ticket}`): a bearer secret. */
    public readonly string $url;

    private int $position;
    private float $ticketTtl;

    /**
     * @param array<string, mixed> $body a Ticket body as Baton sends it
     *
     * @internal made by Client
     */
    public function __construct(
        private readonly Transport $transport,
        array $body,
        private readonly ?Session $session = null,
        private readonly float $longPoll = 20.0
    ) {
        $this->name = (string) ($body['name'] ?? '');
        $this->url = (string) ($body['url'] ?? '');
        $this->update($body);
    }

    /**
     * The place in the queue by the last answer; 1 means next.
     */
    public function position(): int
    {
        return $this->position;
    }

    /**
     * How long the ticket lives without a poll, in seconds.
     */
    public function ticketTtl(): float
    {
        return $this->ticketTtl;
    }

    /**
     * Waits up to $wait seconds for the grant. Returns the Lease once granted
     * (again on a later poll, should an answer be lost), null while still
     * queued (position() is then current) or when a proxy cut the poll short
     * (a 502 or 504: poll again).
     *
     * @throws TicketGoneException when the ticket expired, was cancelled or is unknown
     * @throws BatonException      on any other failure
     */
    public function poll(float $wait = 0.0): ?Lease
    {
        $ms = Duration::ms($wait, 'wait');
        $op = sprintf('wait for "%s"', $this->name);
        $sent = microtime(true);
        $r = $this->transport->send('GET', $this->url . '?wait_ms=' . $ms, null, $ms / 1000, $op, $this->name, false);
        if ($r->status === 200) {
            return new Lease($this->transport, $r->body(), $this->session);
        }
        if ($r->status === 202) {
            $this->update($r->body());

            return null;
        }
        if ($r->status === 502 || $r->status === 504) {
            // A proxy cut the poll short: still queued, as far as anyone knows.
            // One that answers at once (its upstream down) is not asked again at once.
            $left = $ms / 1000 - (microtime(true) - $sent);
            if ($left > 0) {
                usleep((int) (min($left, 0.25) * 1e6));
            }

            return null;
        }
        throw Problems::exception($r, $op, $this->name);
    }

    /**
     * Polls until the grant comes or $wait seconds (INF: no limit) have passed,
     * and leaves the queue when giving up (or when anything but the ticket's
     * end goes wrong). A 502 or 504 from a proxy whose timeout is shorter than
     * a poll just means polling again.
     *
     * @throws LockHeldException   when not granted within $wait (the ticket is cancelled)
     * @throws TicketGoneException when the ticket ended meanwhile
     * @throws BatonException      on any other failure
     */
    public function await(float $wait = INF): Lease
    {
        if (is_nan($wait) || $wait < 0) {
            throw new InvalidArgumentException('wait must be a number of seconds >= 0 (INF: no limit)');
        }
        $deadline = microtime(true) + $wait;
        try {
            do {
                $lease = $this->poll(max(0.0, min($deadline - microtime(true), $this->longPoll)));
                if ($lease !== null) {
                    return $lease;
                }
            } while ($deadline > microtime(true));
        } catch (TicketGoneException $e) {
            throw $e;
        } catch (\Throwable $e) {
            try {
                $this->cancel();
            } catch (ExceptionInterface) {
            }
            throw $e;
        }
        $this->cancel();
        $detail = sprintf('not granted within %g s; left the fair queue (at position %d)', $wait, $this->position);
        throw new LockHeldException(
            sprintf('acquire "%s": %s', $this->name, $detail),
            '/problems/lock-held',
            423,
            $detail,
            null,
            null,
            null,
            $this->name
        );
    }

    /**
     * Leaves the queue (a grant not yet claimed passes on to the next ticket).
     * Returns false when the ticket was already gone.
     *
     * @throws BatonException when Baton cannot be asked
     */
    public function cancel(): bool
    {
        $op = sprintf('leave the queue of "%s"', $this->name);
        $r = $this->transport->send('DELETE', $this->url, null, 0.0, $op, $this->name);
        if ($r->status === 204) {
            return true;
        }
        if ($r->status === 410) {
            return false;
        }
        throw Problems::exception($r, $op, $this->name);
    }

    /**
     * @param array<string, mixed> $body
     */
    private function update(array $body): void
    {
        $this->position = (int) ($body['position'] ?? 0);
        $this->ticketTtl = Duration::seconds($body['ticket_ttl_ms'] ?? null) ?? 0.0;
    }

    /**
     * @return array<string, mixed>
     */
    public function __debugInfo(): array
    {
        return ['name' => $this->name, 'position' => $this->position, 'ticketTtl' => $this->ticketTtl];
    }
}
