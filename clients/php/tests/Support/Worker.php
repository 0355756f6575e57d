<?php

declare(strict_types=1);

namespace Baton\Tests\Support;

use PHPUnit\Framework\Assert;

/**
 * Worker is another PHP process (tests/Support/worker.php), as another request
 * of a PHP application would be; the test reads the lines it prints to know
 * where it is, instead of sleeping.
 */
final class Worker
{
    /** @var resource */
    private $proc;

    /** @var array<int, resource> */
    private array $pipes;

    private string $stderr = '';

    /**
     * @param list<string> $args
     */
    public function __construct(array $args)
    {
        $proc = proc_open(
            [PHP_BINARY, '-d', 'zend.exception_ignore_args=0', __DIR__ . '/worker.php', ...$args],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $pipes
        );
        Assert::assertIsResource($proc, 'start a worker');
        $this->proc = $proc;
        $this->pipes = $pipes;
        stream_set_blocking($pipes[2], false);
    }

    /**
     * Tells a worker holding a lock "until told" to go on.
     */
    public function tell(): void
    {
        fwrite($this->pipes[0], "go\n");
        fflush($this->pipes[0]);
    }

    /**
     * Waits for the next line the worker prints, which must start with $prefix;
     * returns the rest of it.
     */
    public function expect(string $prefix, float $timeout = 15.0): string
    {
        $out = $this->pipes[1];
        $read = [$out];
        $none = null;
        $ready = stream_select($read, $none, $none, (int) $timeout, (int) (fmod($timeout, 1.0) * 1e6));
        $line = $ready ? fgets($out) : false;
        if ($line === false) {
            $this->drain();
            Assert::fail(sprintf('worker: no line "%s..." within %g s; stderr: %s', $prefix, $timeout, $this->stderr));
        }
        $line = rtrim($line, "\n");
        Assert::assertStringStartsWith($prefix, $line, 'worker stderr: ' . $this->stderr);

        return trim(substr($line, strlen($prefix)));
    }

    /**
     * Waits for the worker to end; returns its exit code.
     */
    public function wait(): int
    {
        fclose($this->pipes[0]);
        $rest = stream_get_contents($this->pipes[1]);
        $this->drain();
        stream_set_blocking($this->pipes[2], true);
        $this->stderr .= stream_get_contents($this->pipes[2]);
        fclose($this->pipes[1]);
        fclose($this->pipes[2]);
        $code = proc_close($this->proc);
        if ($code !== 0 && $code !== 3) {
            fwrite(STDERR, "worker exited $code; stdout: $rest; stderr: {$this->stderr}\n");
        }

        return $code;
    }

    public function stderr(): string
    {
        return $this->stderr;
    }

    private function drain(): void
    {
        $this->stderr .= (string) stream_get_contents($this->pipes[2]);
    }
}
