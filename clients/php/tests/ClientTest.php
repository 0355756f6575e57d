<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Client;
use Baton\Exception\BatonException;
use Baton\Exception\ExceptionInterface;
use Baton\Exception\InvalidArgumentException;
use Baton\Exception\InvalidRequestException;
use Baton\Exception\LeaseLostException;
use Baton\Exception\LimitMismatchException;
use Baton\Exception\LockHeldException;
use Baton\Lease;
use Baton\Tests\Support\BatonTestCase;
use Baton\Ticket;

/**
 * The Client surface of CLIENTS.md: acquire, the lease, synchronized, fair
 * waits, shared holds, state, typed errors, durations in float seconds.
 */
final class ClientTest extends BatonTestCase
{
    public function testUrlAndKeyComeFromArgumentsElseEnvironmentElseDefault(): void
    {
        $url = getenv('BATON_URL');
        $key = getenv('BATON_API_KEY');
        try {
            $given = new Client('http://baton.example:9/', 'bk_x');
            $want = ['url' => 'http://baton.example:9', 'apiKey' => '[redacted]'];
            self::assertSame($want, array_slice($given->__debugInfo(), 0, 2));
            self::assertSame($url, (new Client())->__debugInfo()['url'], 'BATON_URL');
            self::assertSame('[redacted]', (new Client())->__debugInfo()['apiKey'], 'BATON_API_KEY');
            putenv('BATON_URL');
            putenv('BATON_API_KEY');
            $none = new Client();
            self::assertSame(['url' => Client::DEFAULT_URL, 'apiKey' => null], array_slice($none->__debugInfo(), 0, 2));
        } finally {
            putenv("BATON_URL=$url");
            putenv("BATON_API_KEY=$key");
        }
        // The key from the environment is sent: this server wants one.
        $lease = (new Client())->acquire($this->name(), wait: 0.0);
        self::assertTrue($lease->release());
    }

    public function testAcquireRenewRelease(): void
    {
        $c = new Client();
        $name = $this->name();
        $lease = $c->acquire($name, ttl: 1.5, wait: 0.0, owner: 'php-test');
        self::assertSame($name, $lease->name);
        self::assertGreaterThan(0, $lease->fence);
        self::assertSame(1, $lease->count());
        self::assertFalse($lease->shared);
        self::assertSame('php-test', $lease->owner);
        self::assertStringStartsWith("/v1/locks/$name/leases/", $lease->url);
        self::assertEqualsWithDelta(1.5, $lease->ttl(), 0.2, 'ttl 1.5 s is 1500 ms');

        $state = $c->state($name);
        self::assertTrue($state['held']);
        self::assertSame($lease->fence, $state['fence']);
        self::assertSame('php-test', $state['owner']);
        self::assertLessThanOrEqual(1500, $state['ttl_ms']);
        self::assertGreaterThan(1000, $state['ttl_ms']);

        $lease->renew(20.25);
        self::assertEqualsWithDelta(20.25, $lease->ttl(), 0.2);
        self::assertGreaterThan(20000, $c->state($name)['ttl_ms']);
        $lease->renew();
        self::assertTrue($lease->isHeld());

        self::assertTrue($lease->release());
        self::assertTrue($lease->isReleased());
        self::assertFalse($lease->release(), 'a second release does nothing');
        self::assertFalse($c->state($name)['held']);
        $this->expectException(LeaseLostException::class);
        $lease->renew();
    }

    public function testFencesGrowWithEveryGrant(): void
    {
        $c = new Client();
        $name = $this->name();
        $last = 0;
        for ($i = 0; $i < 3; $i++) {
            $lease = $c->acquire($name, wait: 0.0);
            self::assertGreaterThan($last, $lease->fence);
            $last = $lease->fence;
            $lease->release();
        }
    }

    public function testLockHeldCarriesTheHolderAndRetryAfter(): void
    {
        $c = new Client();
        $name = $this->name();
        $c->acquire($name, ttl: 5.0, wait: 0.0, owner: 'holder-1');
        $start = microtime(true);
        try {
            $c->acquire($name, wait: 0.0);
            self::fail('acquired a held lock');
        } catch (\Baton\LockHeldException $e) { // the name CLIENTS.md uses
            self::assertInstanceOf(LockHeldException::class, $e);
            self::assertInstanceOf(BatonException::class, $e);
            self::assertInstanceOf(ExceptionInterface::class, $e);
            self::assertSame('/problems/lock-held', $e->type);
            self::assertSame('lock-held', $e->kind());
            self::assertSame(423, $e->status);
            self::assertNotSame('', $e->detail);
            self::assertSame('holder-1', $e->owner);
            self::assertEqualsWithDelta(5.0, (float) $e->ttl, 0.5);
            self::assertSame(5.0, $e->retryAfter);
            self::assertSame($name, $e->lock);
            self::assertSame(0, $e->waiters());
            self::assertStringContainsString("acquire \"$name\": 423 lock-held", $e->getMessage());
            self::assertStringContainsString('held by "holder-1"', $e->getMessage());
        }
        self::assertLessThan(4.0, microtime(true) - $start, 'wait 0 answers at once, not when the 5 s hold ends');
    }

    public function testAcquireWaitsForTheHolderToGo(): void
    {
        $c = new Client();
        $name = $this->name();
        $first = $c->acquire($name, ttl: 0.4, wait: 0.0);
        $start = microtime(true);
        $second = $c->acquire($name, ttl: 5.0, wait: 20.0);
        $took = microtime(true) - $start;
        self::assertGreaterThan($first->fence, $second->fence);
        self::assertGreaterThan(0.2, $took, 'granted only when the first lease ran out');
        self::assertLessThan(10.0, $took, 'granted when it ran out, not when the wait did');
        $second->release();
    }

    public function testAWaitLongerThanOneRequestIsSeveralRequests(): void
    {
        $c = new Client(longPoll: 0.3);
        $name = $this->name();
        $c->acquire($name, ttl: 1.0, wait: 0.0);
        $lease = $c->acquire($name, wait: 5.0);
        self::assertTrue($lease->release());

        $c->acquire($name, ttl: 10.0, wait: 0.0);
        $start = microtime(true);
        try {
            $c->acquire($name, wait: 1.0);
            self::fail('acquired a held lock');
        } catch (LockHeldException) {
        }
        $took = microtime(true) - $start;
        self::assertGreaterThan(0.6, $took, 'waited');
        self::assertLessThan(5.0, $took, 'gave up when the wait ran out, not when the 10 s hold did');
    }

    public function testFairWaitIsGrantedInTurn(): void
    {
        $c = new Client(longPoll: 0.5);
        $name = $this->name();
        $holder = $c->acquire($name, ttl: 0.6, wait: 0.0);
        $lease = $c->acquire($name, ttl: 5.0, wait: 5.0, fair: true);
        self::assertGreaterThan($holder->fence, $lease->fence);
        self::assertSame(0, $c->state($name)['waiters']);
        $lease->release();
    }

    public function testFairWaitThatRunsOutLeavesTheQueue(): void
    {
        $c = new Client();
        $name = $this->name();
        $holder = $c->acquire($name, ttl: 10.0, wait: 0.0);
        try {
            $c->acquire($name, wait: 0.3, fair: true);
            self::fail('acquired a held lock');
        } catch (LockHeldException $e) {
            self::assertStringContainsString('left the fair queue', $e->getMessage());
        }
        // Deleted at once, not left to expire after ticket_ttl_ms.
        self::assertSame(0, $c->state($name)['waiters']);
        $holder->release();
        self::assertFalse($c->state($name)['held'], 'nobody was handed the lock');
    }

    public function testEnqueueAndResumeATicketInALaterRequest(): void
    {
        $c = new Client();
        $name = $this->name();
        $holder = $c->acquire($name, ttl: 10.0, wait: 0.0);
        $ticket = $c->enqueue($name, ttl: 5.0);
        self::assertInstanceOf(Ticket::class, $ticket);
        self::assertSame(1, $ticket->position());
        self::assertGreaterThan(0.0, $ticket->ticketTtl());
        self::assertNull($ticket->poll());

        $later = (new Client())->ticket($ticket->url); // another request, with the URL kept
        $holder->release();
        $lease = $later->poll(10.0);
        self::assertInstanceOf(Lease::class, $lease);
        self::assertSame($name, $lease->name);
        self::assertSame($lease->url, $later->poll()?->url, 'a later poll gets the same lease');

        $again = (new Client())->lease($lease->url);
        self::assertSame($lease->fence, $again->fence);
        self::assertTrue($again->release());
        self::assertFalse($c->enqueue($name) instanceof Ticket, 'a free lock is granted at once');
    }

    public function testSynchronizedReleasesOnEveryWayOut(): void
    {
        $c = new Client();
        $name = $this->name();
        $result = $c->synchronized($name, function (Lease $lease) use ($c, $name) {
            self::assertTrue($c->state($name)['held']);

            return $lease->fence;
        }, ttl: 5.0, wait: 1.0);
        self::assertIsInt($result);
        self::assertFalse($c->state($name)['held'], 'released after a return');

        try {
            $c->synchronized($name, fn () => throw new \DomainException('work failed'));
            self::fail('the exception was swallowed');
        } catch (\DomainException $e) {
            self::assertSame('work failed', $e->getMessage());
        }
        self::assertFalse($c->state($name)['held'], 'released after an exception');

        self::assertSame('ok', $c->synchronized($name, fn () => 'ok'), 'a callable may ignore the lease');

        $w = $this->worker(['exit-inside', $name]);
        $w->expect('inside');
        self::assertSame(0, $w->wait());
        self::assertFalse($c->state($name)['held'], 'released after exit()');
    }

    public function testSynchronizedTellsWhenTheHoldWasLostDuringTheWork(): void
    {
        $c = new Client();
        $name = $this->name();
        $this->expectException(LeaseLostException::class);
        $c->synchronized($name, fn () => $c->forceRelease($name), ttl: 5.0);
    }

    public function testSynchronizedWhenHeld(): void
    {
        $c = new Client();
        $name = $this->name();
        $c->acquire($name, ttl: 5.0, wait: 0.0);
        $ran = false;
        try {
            $c->synchronized($name, function () use (&$ran) {
                $ran = true;
            }, wait: 0.0);
        } catch (LockHeldException) {
        }
        self::assertFalse($ran);
    }

    public function testSharedHoldsAndSemaphores(): void
    {
        $c = new Client();
        $name = $this->name();
        $r1 = $c->acquire($name, wait: 0.0, shared: true, owner: 'r1');
        $r2 = $c->acquire($name, wait: 0.0, shared: true, owner: 'r2');
        self::assertTrue($r1->shared);
        self::assertNotSame($r1->fence, $r2->fence);
        $state = $c->state($name);
        self::assertSame('shared', $state['mode']);
        self::assertSame(2, $state['holders']);
        self::assertCount(2, $state['holds']);
        try {
            $c->acquire($name, wait: 0.0);
            self::fail('an exclusive hold beside shared ones');
        } catch (LockHeldException) {
        }
        $r1->release();
        $r2->release();
        $w = $c->acquire($name, wait: 0.0);
        self::assertSame('exclusive', $c->state($name)['mode']);
        $w->release();

        $sem = $this->name();
        $p1 = $c->acquire($sem, wait: 0.0, shared: true, limit: 2);
        $p2 = $c->acquire($sem, wait: 0.0, shared: true, limit: 2);
        self::assertSame(2, $p1->limit);
        try {
            $c->acquire($sem, wait: 0.0, shared: true, limit: 2);
            self::fail('a third permit of two');
        } catch (LockHeldException) {
        }
        try {
            $c->acquire($sem, wait: 0.0, shared: true, limit: 5);
            self::fail('another limit');
        } catch (LimitMismatchException $e) {
            self::assertSame(409, $e->status);
            self::assertSame(2, $e->limit());
        }
        $p1->release();
        $p3 = $c->acquire($sem, wait: 1.0, shared: true, limit: 2);
        $p2->release();
        $p3->release();
    }

    public function testStateWatchReturnsWhenTheLockChanges(): void
    {
        $c = new Client();
        $name = $this->name();
        $lease = $c->acquire($name, ttl: 0.5, wait: 0.0);
        $start = microtime(true);
        $state = $c->state($name, wait: 20.0);
        self::assertFalse($state['held']);
        self::assertLessThan(10.0, microtime(true) - $start, 'answered when the lease ran out, not when the wait did');
        self::assertSame($lease->fence, $state['fence']);
    }

    public function testErrorsAreTyped(): void
    {
        $c = new Client();
        try {
            $c->acquire('no spaces/allowed', wait: 0.0);
            self::fail('a bad name was accepted');
        } catch (InvalidRequestException $e) {
            self::assertSame('/problems/invalid-name', $e->type);
            self::assertSame(400, $e->status);
        }
        try {
            $c->acquire($this->name(), ttl: 0.001, wait: 0.0);
            self::fail('a ttl under the minimum was accepted');
        } catch (InvalidRequestException $e) {
            self::assertSame('invalid-request', $e->kind());
            self::assertArrayHasKey('ttl_ms', $e->errors());
        }
        foreach (
            [fn () => $c->acquire('x', ttl: -1.0), fn () => $c->acquire('x', wait: NAN),
                  fn () => $c->acquire('x', limit: 3), fn () => $c->lease('/not/a/lease')] as $bad
        ) {
            try {
                $bad();
                self::fail('a bad argument was accepted');
            } catch (InvalidArgumentException $e) {
                self::assertInstanceOf(ExceptionInterface::class, $e);
            }
        }
        try {
            (new Client('ftp://nowhere'))->acquire('x');
            self::fail('an ftp URL was used');
        } catch (InvalidArgumentException) {
        }
    }

    public function testDurationsAreFloatSecondsSentAsMilliseconds(): void
    {
        $c = new Client();
        foreach ([[0.25, 250], [1.0, 1000], [2.5004, 2500], [0.1006, 101]] as [$seconds, $ms]) {
            $start = microtime(true);
            $lease = $c->acquire($this->name(), ttl: $seconds, wait: 0.0);
            $left = (int) round($lease->ttl() * 1000);
            $since = (int) ceil((microtime(true) - $start) * 1000); // the lease's time runs meanwhile
            self::assertLessThanOrEqual($ms, $left);
            self::assertGreaterThan($ms - 100 - $since, $left);
            $lease->release();
        }
    }
}
